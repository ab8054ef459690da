#include "lib/metrics/flops.h"

#include <sys/resource.h>

#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace titan {
namespace {

struct PeakFlopsEntry {
  std::vector<absl::string_view> name_parts;  // all must occur in the lowercased device name
  double bfloat16;
  double float32;  // 0: not published
};

// Dense (no sparsity) datasheet figures; more specific names come first ("gb200" contains "b200").
const std::vector<PeakFlopsEntry>& PeakFlopsTable() {
  static const auto* const table = new std::vector<PeakFlopsEntry>{
      // NVIDIA Blackwell.
      {{"gb200"}, 2.5e15, 0},
      {{"b200"}, 2.25e15, 0},
      // NVIDIA Hopper.
      {{"h200", "nvl"}, 835e12, 60e12},
      {{"h200"}, 989e12, 67e12},
      {{"h100", "nvl"}, 835e12, 60e12},
      {{"h100", "pcie"}, 756e12, 51e12},
      {{"h100"}, 989e12, 67e12},
      // NVIDIA Ampere and Ada.
      {{"a100"}, 312e12, 19.5e12},
      {{"l40s"}, 362e12, 91.6e12},
      // AMD CDNA 3 and 4.
      {{"mi355"}, 2.5e15, 157.3e12},
      {{"mi325"}, 1307.4e12, 163.4e12},
      {{"mi300x"}, 1307.4e12, 163.4e12},
      {{"mi300a"}, 980.6e12, 122.6e12},
  };
  return *table;
}

}  // namespace

int64_t NumFlopsPerToken(const DenseTransformerShape& shape) {
  const int64_t matmul_params = shape.num_params - shape.num_embedding_params +
                                (shape.tied_output ? shape.num_embedding_params : 0);
  return 6 * matmul_params + 12 * shape.n_layers * shape.n_heads * shape.head_dim * shape.seq_len;
}

double PeakFlops(absl::string_view device_name, MatmulDtype dtype) {
  const std::string name = absl::AsciiStrToLower(device_name);
  for (const PeakFlopsEntry& entry : PeakFlopsTable()) {
    bool matches = true;
    for (const absl::string_view part : entry.name_parts)
      matches = matches && absl::StrContains(name, part);
    if (matches) return dtype == MatmulDtype::kBfloat16 ? entry.bfloat16 : entry.float32;
  }
  return 0;
}

Throughput ComputeThroughput(double tokens, double seconds, int64_t flops_per_token,
                             double peak_flops) {
  Throughput throughput;
  if (seconds <= 0) return throughput;
  throughput.tokens_per_second = tokens / seconds;
  const double flops_per_second =
      throughput.tokens_per_second * static_cast<double>(flops_per_token);
  throughput.tflops = flops_per_second / 1e12;
  if (peak_flops > 0) throughput.mfu_percent = 100.0 * flops_per_second / peak_flops;
  return throughput;
}

double PeakRssGiB() {
  struct rusage usage = {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  // Linux reports ru_maxrss in KiB.
  return static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0);
}

double Stopwatch::ElapsedSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double Stopwatch::Lap() {
  const std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  start_ = now;
  return elapsed;
}

}  // namespace titan
