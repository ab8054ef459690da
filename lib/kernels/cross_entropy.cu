// Cross-entropy over a vocabulary from low-precision logits (cross_entropy_math.h): a block per
// row, forward one read of the row (its log-sum-exp and the label's loss), backward one read and
// one write (the logits' gradient in their dtype). ATen's path casts the logits to fp32, keeps
// fp32 log-probabilities for backward and casts the fp32 gradient back: 6 passes over a
// [tokens, 128k] tensor and 4 GB held at Llama 3 8B's batch.
#include <cstdint>

#include "lib/kernels/cross_entropy_math.h"
#include "lib/kernels/cuda_dtype.cuh"
#include "lib/kernels/launch.h"

namespace titan {
namespace {

constexpr int kRowThreads = 512;

// The block's merged log-sum-exp, in every thread.
__device__ LogSumExpPart BlockLogSumExp(LogSumExpPart part) {
  __shared__ float maxes[kRowThreads / 32];
  __shared__ float sums[kRowThreads / 32];
  __shared__ float total_max;
  __shared__ float total_sum;
  for (int offset = 16; offset > 0; offset /= 2) {
    const LogSumExpPart other{__shfl_xor_sync(0xffffffff, part.max, offset),
                              __shfl_xor_sync(0xffffffff, part.sum, offset)};
    part = MergeLogSumExp(part, other);
  }
  const int warp = threadIdx.x / 32;
  if (threadIdx.x % 32 == 0) {
    maxes[warp] = part.max;
    sums[warp] = part.sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    LogSumExpPart merged;
    for (int w = 0; w < kRowThreads / 32; ++w) merged = MergeLogSumExp(merged, {maxes[w], sums[w]});
    total_max = merged.max;
    total_sum = merged.sum;
  }
  __syncthreads();
  return {total_max, total_sum};
}

template <typename T, int K>
__global__ void __launch_bounds__(kRowThreads)
    CrossEntropyForwardKernel(const T* __restrict__ logits, const int64_t* __restrict__ labels,
                              int64_t cols, int64_t ignore_index, SoftmaxStats* __restrict__ stats,
                              float* __restrict__ loss) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  LogSumExpPart part;
  for (int64_t c = threadIdx.x * K; c < cols; c += kRowThreads * K) {
    const Pack<T, K> e = *reinterpret_cast<const Pack<T, K>*>(x + c);
#pragma unroll
    for (int k = 0; k < K; ++k) AddToLogSumExp(part, ToFloat(e.v[k]));
  }
  const SoftmaxStats row_stats = SoftmaxStatsOf(BlockLogSumExp(part));
  if (threadIdx.x == 0) {
    const int64_t label = labels[row];
    stats[row] = row_stats;
    // A label outside the vocabulary makes the loss NaN (ATen stops on a device assert).
    loss[row] = label == ignore_index        ? 0.0f
                : label < 0 || label >= cols ? NAN
                                             : CrossEntropyLoss(row_stats, ToFloat(x[label]));
  }
}

template <typename T, int K>
__global__ void __launch_bounds__(kRowThreads)
    CrossEntropyBackwardKernel(const T* __restrict__ logits, const int64_t* __restrict__ labels,
                               const SoftmaxStats* __restrict__ stats,
                               const float* __restrict__ grad, int64_t cols, int64_t ignore_index,
                               T* __restrict__ grad_logits) {
  const int64_t row = blockIdx.x;
  const T* x = logits + row * cols;
  T* out = grad_logits + row * cols;
  const int64_t label = labels[row];
  const float g = label == ignore_index ? 0.0f : *grad;
  const SoftmaxStats row_stats = stats[row];
  for (int64_t c = threadIdx.x * K; c < cols; c += kRowThreads * K) {
    const Pack<T, K> e = *reinterpret_cast<const Pack<T, K>*>(x + c);
    Pack<T, K> o;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      o.v[k] = FromFloat<T>(CrossEntropyGradElement(ToFloat(e.v[k]), row_stats, c + k == label, g));
    }
    *reinterpret_cast<Pack<T, K>*>(out + c) = o;
  }
}

}  // namespace

cudaError_t LaunchCrossEntropyForward(KernelDtype dtype, const void* logits, const int64_t* labels,
                                      int64_t rows, int64_t cols, int64_t ignore_index,
                                      SoftmaxStats* stats, float* loss, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return LaunchRowsInChunks<T>({logits}, cols, [&](auto width) {
      constexpr int K = decltype(width)::value;
      CrossEntropyForwardKernel<T, K><<<rows, kRowThreads, 0, stream>>>(
          static_cast<const T*>(logits), labels, cols, ignore_index, stats, loss);
      return cudaGetLastError();
    });
  });
}

cudaError_t LaunchCrossEntropyBackward(KernelDtype dtype, const void* logits, const int64_t* labels,
                                       const SoftmaxStats* stats, const float* grad, int64_t rows,
                                       int64_t cols, int64_t ignore_index, void* grad_logits,
                                       cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return LaunchRowsInChunks<T>(
        {logits, grad_logits}, cols, [&](auto width) {
          constexpr int K = decltype(width)::value;
          CrossEntropyBackwardKernel<T, K>
              <<<rows, kRowThreads, 0, stream>>>(static_cast<const T*>(logits), labels, stats, grad,
                                                 cols, ignore_index, static_cast<T*>(grad_logits));
          return cudaGetLastError();
        });
  });
}

}  // namespace titan
