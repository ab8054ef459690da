// The fused RoPE and SwiGLU kernels (lib/kernels) against ATen's compositions at Llama 3 8B's
// shapes in bf16: RoPE on q [1, 8192, 32, 128] in both layouts, SwiGLU on gate/up [8192, 14336].
// Per op: forward alone (no grad), forward + backward, and the bytes the autograd graph holds after
// the forward (output included). Then the float8 cast of a bf16 [8192, 14336] activation
// (tensorwise and per-row scales) and in both of _scaled_mm's layouts (that activation, and an fp32
// [14336, 4096] weight): fused vs ATen's composition; and the cross-entropy of bf16
// logits [8192, 128256] (Llama 3's vocabulary) summed over tokens, fused vs ATen's on fp32
// logits (titan's loss before the kernels). Median of timed repeats (10 calls each) after 3
// warm-ups, CUDA events.
// Usage on a GPU: fused_kernels_benchmark [repeats]
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/core/GradMode.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "lib/kernels/cross_entropy.h"
#include "lib/kernels/float8_cast.h"
#include "lib/kernels/rope.h"
#include "lib/kernels/swiglu.h"
#include "lib/model/rope.h"

namespace {

using Op = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

// Calls timed between one pair of events: one alone would also time the host's launch of it onto
// an idle GPU, a large share of a tens-of-microseconds kernel.
constexpr int kCallsPerTiming = 10;

double MedianMs(const std::function<void()>& fn, int repeats) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    at::cuda::CUDAEvent start(cudaEventDefault);
    at::cuda::CUDAEvent end(cudaEventDefault);
    start.record();
    for (int call = 0; call < kCallsPerTiming; ++call) fn();
    end.record();
    end.synchronize();
    ms.push_back(start.elapsed_time(end) / kCallsPerTiming);
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

int64_t AllocatedBytes() {
  c10::cuda::device_synchronize();
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
}

struct Measure {
  double forward_ms;
  double forward_backward_ms;
  double held_mib;
};

Measure Run(const Op& op, const std::vector<at::Tensor>& inputs, const at::Tensor& grad,
            int repeats) {
  std::vector<at::Tensor> leaves;
  for (const at::Tensor& t : inputs) leaves.push_back(t.detach().requires_grad_());
  Measure m;
  m.forward_ms = MedianMs(
      [&] {
        c10::NoGradGuard no_grad;
        op(inputs);
      },
      repeats);
  m.forward_backward_ms = MedianMs(
      [&] {
        for (at::Tensor& leaf : leaves) leaf.mutable_grad().reset();  // assigned, not accumulated
        op(leaves).backward(grad);
      },
      repeats);
  for (at::Tensor& leaf : leaves) leaf.mutable_grad().reset();
  const int64_t before = AllocatedBytes();
  {
    const at::Tensor out = op(leaves);
    m.held_mib = (AllocatedBytes() - before) / 1048576.0;
  }
  return m;
}

void Compare(const char* name, const Op& fused, const Op& aten,
             const std::vector<at::Tensor>& inputs, int repeats) {
  const at::Tensor grad = at::randn_like(aten(inputs));
  const Measure f = Run(fused, inputs, grad, repeats);
  const Measure a = Run(aten, inputs, grad, repeats);
  int64_t bytes = grad.nbytes();  // the forward's output
  for (const at::Tensor& t : inputs) bytes += t.nbytes();
  std::printf(
      "%s: forward %.3f ms fused vs %.3f ms ATen (%.2fx, fused %.0f GB/s); forward + backward "
      "%.3f vs %.3f ms (%.2fx); held after forward %.0f vs %.0f MiB\n",
      name, f.forward_ms, a.forward_ms, a.forward_ms / f.forward_ms, bytes / f.forward_ms / 1e6,
      f.forward_backward_ms, a.forward_backward_ms, a.forward_backward_ms / f.forward_backward_ms,
      f.held_mib, a.held_mib);
  std::fflush(stdout);
}

// The float8 cast: no autograd, so forward time only. `both_layouts`: _scaled_mm's two layouts
// from one read, against ATen's cast then a transposing copy.
void CompareFloat8Cast(const char* name, const at::Tensor& hp, const at::Tensor& scale,
                       bool both_layouts, int repeats) {
  const double max = titan::Float8MaxOf(at::kFloat8_e4m3fn);
  const double fused = MedianMs(
      [&] {
        if (both_layouts) {
          titan::FusedScaledCastToFloat8BothLayouts(hp, scale, at::kFloat8_e4m3fn);
        } else {
          titan::FusedScaledCastToFloat8(hp, scale, at::kFloat8_e4m3fn);
        }
      },
      repeats);
  const double aten = MedianMs(
      [&] {
        const at::Tensor cast = (hp.to(at::kFloat) * scale).clamp(-max, max).to(at::kFloat8_e4m3fn);
        if (both_layouts) cast.t().contiguous();
      },
      repeats);
  // Read once, written as one byte an element in each layout.
  const double bytes = hp.nbytes() + (both_layouts ? 2 : 1) * hp.numel();
  std::printf("float8 cast%s %s: %.3f ms fused vs %.3f ms ATen (%.2fx, fused %.0f GB/s)\n",
              both_layouts ? ", both layouts" : "", name, fused, aten, aten / fused,
              bytes / fused / 1e6);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (!at::cuda::is_available()) {
    std::fprintf(stderr, "fused_kernels_benchmark: no CUDA device\n");
    return 1;
  }
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 20;
  at::manual_seed(0);
  const auto bf16 = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  const at::Tensor q = at::randn({1, 8192, 32, 128}, bf16);
  for (const titan::RopeLayout layout :
       {titan::RopeLayout::kInterleaved, titan::RopeLayout::kRotateHalf}) {
    titan::RopeConfig config;
    config.layout = layout;
    config.theta = 500000;
    const titan::RopeRotation rotation = titan::RotationForPositions(
        titan::ComputeRopeTables(config, 128, 8192, bf16), at::Tensor(), 8192);
    const bool interleaved = layout == titan::RopeLayout::kInterleaved;
    const titan::RopePairing pairing =
        interleaved ? titan::RopePairing::kInterleaved : titan::RopePairing::kHalves;
    Compare(
        interleaved ? "rope interleaved [1, 8192, 32, 128]" : "rope halves [1, 8192, 32, 128]",
        [&](const std::vector<at::Tensor>& in) {
          return titan::FusedRope(in[0], rotation.cos, rotation.sin, pairing);
        },
        [&](const std::vector<at::Tensor>& in) { return titan::ApplyRopeUnfused(in[0], rotation); },
        {q}, repeats);
  }
  Compare(
      "swiglu [8192, 14336]",
      [](const std::vector<at::Tensor>& in) { return titan::FusedSwiGlu(in[0], in[1]); },
      [](const std::vector<at::Tensor>& in) { return at::silu(in[0]) * in[1]; },
      {at::randn({8192, 14336}, bf16), at::randn({8192, 14336}, bf16)}, repeats);
  const at::Tensor activation = at::randn({8192, 14336}, bf16);
  const auto fp32 = bf16.dtype(at::kFloat);
  CompareFloat8Cast("tensorwise [8192, 14336]", activation, at::full({}, 0.5f, fp32), false,
                    repeats);
  CompareFloat8Cast("per row [8192, 14336]", activation, at::rand({8192, 1}, fp32) + 0.5, false,
                    repeats);
  CompareFloat8Cast("bf16 [8192, 14336]", activation, at::full({}, 0.5f, fp32), true, repeats);
  CompareFloat8Cast("fp32 weight [14336, 4096]", at::randn({14336, 4096}, fp32),
                    at::full({}, 0.5f, fp32), true, repeats);
  const at::Tensor labels = at::randint(128256, {8192}, bf16.dtype(at::kLong));
  Compare(
      "cross-entropy [8192, 128256]",
      [&](const std::vector<at::Tensor>& in) {
        return titan::FusedCrossEntropySum(in[0], labels, -100);
      },
      [&](const std::vector<at::Tensor>& in) {
        return at::cross_entropy_loss(in[0].to(at::kFloat), labels, {}, at::Reduction::Sum, -100,
                                      0.0);
      },
      {at::randn({8192, 128256}, bf16)}, repeats);
  return 0;
}
