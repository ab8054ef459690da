// How long a training step waits for its batch, at data-parallel degrees 1..8 with a fixed global
// batch, with and without the loader's read-ahead thread. The step's compute is simulated by a
// sleep that shrinks with dp (an accelerator's step leaves the host idle); every rank still
// tokenizes the whole stream to find its windows, so without read-ahead the wait stays the same
// while the compute shrinks. Measured on rank 0.
// Usage: bazel run //benchmarks:data_loading_benchmark -- [global_batch] [seq_len] [step_ms_at_dp1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "lib/data/text_data_loader.h"
#include "lib/tokenizer/tokenizer_loader.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int global_batch = argc > 1 ? std::atoi(argv[1]) : 32;
  const int seq_len = argc > 2 ? std::atoi(argv[2]) : 2048;
  const double step_ms_at_dp1 = argc > 3 ? std::atof(argv[3]) : 800;
  constexpr int kSteps = 12;
  auto tokenizer = titan::LoadTokenizer("assets/default_tokenizer");
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tokenizer.status().message()).c_str());
    return 1;
  }
  std::printf("global batch %d x %d tokens, simulated compute %.0f ms / dp per step, %d steps\n",
              global_batch, seq_len, step_ms_at_dp1, kSteps);
  std::printf("%4s %10s %22s %22s\n", "dp", "compute", "wait, no read-ahead", "wait, read-ahead");
  for (int dp : {1, 2, 4, 8}) {
    const int local = global_batch / dp;
    const double compute_ms = step_ms_at_dp1 / dp;
    std::vector<double> waits[2];
    for (int ahead = 0; ahead < 2; ++ahead) {
      titan::TextDatasetOptions options;
      options.path = "assets/default_corpus/train.jsonl";
      options.seq_len = seq_len;
      options.dp_rank = 0;
      options.dp_world_size = dp;
      auto dataset = titan::PackedTextDataset::Open(options, tokenizer->get());
      if (!dataset.ok()) return 1;
      titan::TextDataLoader loader(std::move(*dataset));
      if (ahead) loader.StartReadAhead(local, 2);
      for (int step = 0; step < kSteps; ++step) {
        const auto start = Clock::now();
        if (!loader.NextBatch(local).ok()) return 1;
        const double wait = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        if (step > 0) waits[ahead].push_back(wait);  // the first batch has nothing to overlap
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(compute_ms));
      }
    }
    std::printf("%4d %7.0f ms %19.1f ms %19.1f ms\n", dp, compute_ms, Median(waits[0]),
                Median(waits[1]));
  }
  return 0;
}
