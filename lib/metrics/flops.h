#ifndef TITAN_LIB_METRICS_FLOPS_H_
#define TITAN_LIB_METRICS_FLOPS_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "absl/strings/string_view.h"

namespace titan {

// What torchtitan's FLOP accounting needs to know about a dense (non-MoE) transformer.
struct DenseTransformerShape {
  int64_t num_params = 0;            // every parameter, counted once
  int64_t num_embedding_params = 0;  // the token embedding table: a lookup, not a matmul
  // The output head reuses the embedding table: its matmul still runs, though num_params holds
  // the table once (torchtitan's count drops it then and undercounts tied models).
  bool tied_output = false;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;  // dim / n_heads
  int64_t seq_len = 0;   // training sequence length
};

// Training (forward + backward) FLOPs per token, as torchtitan counts them:
// 6 * (num_params - num_embedding_params) + 12 * n_layers * n_heads * head_dim * seq_len, plus
// 6 * num_embedding_params for a tied output head.
// 6 = 2 (multiply + add) * 3 (forward, input gradient, weight gradient) per weight; the attention
// term is QK^T and AV (2 matmuls forward, 4 backward, 2 FLOPs each) without causal-mask savings.
int64_t NumFlopsPerToken(const DenseTransformerShape& shape);

// The dtype the matmuls run in, which picks the peak to compare against.
enum class MatmulDtype { kBfloat16, kFloat32 };

// Datasheet peak dense FLOP/s of one device (found by case-insensitive substring of its name, e.g.
// "NVIDIA H100 80GB HBM3"), or 0 when unknown (CPU, unlisted device, fp32 peak unpublished): 0
// means "do not report MFU" rather than a guess. kFloat32 is the non-tensor-core FP32 peak:
// LibTorch runs fp32 matmuls without TF32 by default.
double PeakFlops(absl::string_view device_name, MatmulDtype dtype);

struct Throughput {
  double tokens_per_second = 0;  // per device
  double tflops = 0;             // achieved model TFLOP/s per device
  std::optional<double> mfu_percent;  // achieved / peak * 100; none when the peak is unknown
};

// Throughput of one device that processed `tokens` in `seconds` (its share: torchtitan divides a
// data-parallel rank's tokens by the tensor/pipeline/context-parallel degree).
Throughput ComputeThroughput(double tokens, double seconds, int64_t flops_per_token,
                             double peak_flops);

// Peak resident set size of this process in GiB (getrusage), the memory figure for CPU runs.
double PeakRssGiB();

// Measures wall time between log steps on a monotonic clock; starts on construction.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}

  double ElapsedSeconds() const;

  // Returns the elapsed seconds and starts a new interval.
  double Lap();

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace titan

#endif  // TITAN_LIB_METRICS_FLOPS_H_
