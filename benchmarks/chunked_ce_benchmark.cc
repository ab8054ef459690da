// Peak memory and time of the output projection + cross-entropy, forward and backward, with full
// logits against ChunkedLinearCrossEntropySum, at Llama 3's 128,256-token vocabulary, on the CPU
// (counting allocator) or a GPU (the caching allocator's peak).
// Usage: bazel run //benchmarks:chunked_ce_benchmark -- [tokens] [dim] [chunk_rows] [cpu|cuda]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "lib/profiling/tracking_allocator.h"
#include "lib/train/chunked_cross_entropy.h"
#include "lib/train/loss.h"

namespace {

struct Measure {
  double peak_mib;
  double seconds;
  double loss;
};

// Bytes in use and the peak since the last reset, on the tensors' device.
struct MemoryProbe {
  bool cuda;
  void ResetPeak() {
    if (!cuda) return titan::TrackingAllocator::Install().ResetPeak();
    c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  }
  int64_t Live() {
    if (!cuda) return titan::TrackingAllocator::Install().live();
    return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
  }
  int64_t Peak() {
    if (!cuda) return titan::TrackingAllocator::Install().peak();
    return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].peak;
  }
};

Measure Run(const std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>& loss_fn,
            const at::Tensor& hidden_in, const at::Tensor& weight_in, MemoryProbe& memory) {
  at::Tensor hidden = hidden_in.detach().requires_grad_(true);
  at::Tensor weight = weight_in.detach().requires_grad_(true);
  // Once untimed, so neither path pays the first call's costs (cuBLAS start-up, first touch).
  loss_fn(hidden, weight).backward();
  hidden.mutable_grad().reset();
  weight.mutable_grad().reset();
  if (memory.cuda) c10::cuda::device_synchronize();
  memory.ResetPeak();
  const int64_t before = memory.Live();
  const auto start = std::chrono::steady_clock::now();
  at::Tensor loss = loss_fn(hidden, weight);
  loss.backward();
  const double value = loss.item<double>();  // also waits for the device
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {(memory.Peak() - before) / 1048576.0, seconds, value};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 2048;
  const int64_t dim = argc > 2 ? std::atoll(argv[2]) : 256;
  const int64_t chunk = argc > 3 ? std::atoll(argv[3]) : 256;
  MemoryProbe memory{argc > 4 && std::string(argv[4]) == "cuda"};
  if (memory.cuda && c10::cuda::device_count() == 0) {
    std::fprintf(stderr, "chunked_ce_benchmark: cuda asked for, no CUDA device\n");
    return 1;
  }
  constexpr int64_t kVocab = 128256;
  if (!memory.cuda) titan::TrackingAllocator::Install();
  at::manual_seed(0);
  const auto on = at::TensorOptions().device(memory.cuda ? at::kCUDA : at::kCPU);
  const at::Tensor hidden = at::randn({tokens, dim}, on);
  const at::Tensor weight = at::randn({kVocab, dim}, on) * 0.02;
  const at::Tensor labels = at::randint(kVocab, {tokens}, on.dtype(at::kLong));
  const Measure full = Run(
      [&](const at::Tensor& h, const at::Tensor& w) {
        return at::cross_entropy_loss(at::linear(h, w), labels, {}, at::Reduction::Sum,
                                      titan::kIgnoreIndex);
      },
      hidden, weight, memory);
  const Measure chunked = Run(
      [&](const at::Tensor& h, const at::Tensor& w) {
        return titan::ChunkedLinearCrossEntropySum(h, w, labels, chunk);
      },
      hidden, weight, memory);
  std::printf("%s: %lld tokens, dim %lld, vocab %lld, fp32, forward + backward\n",
              memory.cuda ? "cuda" : "cpu", static_cast<long long>(tokens), static_cast<long long>(dim),
              static_cast<long long>(kVocab));
  std::printf("full logits:        peak %8.1f MiB above inputs, %.2f s, loss %.6f\n", full.peak_mib,
              full.seconds, full.loss);
  std::printf("chunked (%4lld rows): peak %8.1f MiB above inputs, %.2f s, loss %.6f\n",
              static_cast<long long>(chunk), chunked.peak_mib, chunked.seconds, chunked.loss);
  std::printf("peak ratio chunked / full: %.3f\n", chunked.peak_mib / full.peak_mib);
  return 0;
}
