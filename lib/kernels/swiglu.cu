// SwiGLU forward and backward in one pass each (swiglu_math.h): the backward recomputes silu
// from gate, so nothing but gate and up is kept between them.
#include "lib/kernels/cuda_dtype.cuh"
#include "lib/kernels/launch.h"
#include "lib/kernels/swiglu_math.h"

namespace titan {
namespace {

template <typename T>
__global__ void SwiGluForwardKernel(const T* __restrict__ gate, const T* __restrict__ up, int64_t n,
                                    T* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = FromFloat<T>(SwiGluElement(ToFloat(gate[i]), ToFloat(up[i])));
  }
}

template <typename T>
__global__ void SwiGluBackwardKernel(const T* __restrict__ grad, const T* __restrict__ gate,
                                     const T* __restrict__ up, int64_t n, T* __restrict__ grad_gate,
                                     T* __restrict__ grad_up) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const SwiGluGrads g = SwiGluElementBackward(ToFloat(grad[i]), ToFloat(gate[i]), ToFloat(up[i]));
    grad_gate[i] = FromFloat<T>(g.gate);
    grad_up[i] = FromFloat<T>(g.up);
  }
}

}  // namespace

cudaError_t LaunchSwiGluForward(KernelDtype dtype, const void* gate, const void* up, int64_t n,
                                void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SwiGluForwardKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
        static_cast<const T*>(gate), static_cast<const T*>(up), n, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

cudaError_t LaunchSwiGluBackward(KernelDtype dtype, const void* grad, const void* gate,
                                 const void* up, int64_t n, void* grad_gate, void* grad_up,
                                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    SwiGluBackwardKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
        static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up), n,
        static_cast<T*>(grad_gate), static_cast<T*>(grad_up));
    return cudaGetLastError();
  });
}

}  // namespace titan
