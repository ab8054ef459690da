// SwiGLU forward and backward in one pass each (swiglu_math.h): the backward recomputes silu
// from gate, so nothing but gate and up is kept between them. Each thread moves 16 bytes of each
// tensor per access, as ATen's elementwise kernels do, where the addresses allow.
#include <cstdint>

#include "lib/kernels/cuda_dtype.cuh"
#include "lib/kernels/launch.h"
#include "lib/kernels/swiglu_math.h"

namespace titan {
namespace {

// Calls chunk(base) for each chunk of K elements (from element base) this thread takes,
// grid-stride; the last chunk may be partial (base + K > n).
template <int K, typename F>
__device__ __forceinline__ void ForEachChunk(int64_t n, F&& chunk) {
  const int64_t chunks = (n + K - 1) / K;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < chunks;
       c += stride) {
    chunk(c * K);
  }
}

template <typename T, int K>
__global__ void SwiGluForwardKernel(const T* __restrict__ gate, const T* __restrict__ up, int64_t n,
                                    T* __restrict__ out) {
  using P = Pack<T, K>;
  ForEachChunk<K>(n, [&](int64_t base) {
    if (base + K <= n) {
      const P g = *reinterpret_cast<const P*>(gate + base);
      const P u = *reinterpret_cast<const P*>(up + base);
      P o;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        o.v[k] = FromFloat<T>(SwiGluElement(ToFloat(g.v[k]), ToFloat(u.v[k])));
      }
      *reinterpret_cast<P*>(out + base) = o;
    } else {
      for (int64_t i = base; i < n; ++i) {
        out[i] = FromFloat<T>(SwiGluElement(ToFloat(gate[i]), ToFloat(up[i])));
      }
    }
  });
}

template <typename T, int K>
__global__ void SwiGluBackwardKernel(const T* __restrict__ grad, const T* __restrict__ gate,
                                     const T* __restrict__ up, int64_t n, T* __restrict__ grad_gate,
                                     T* __restrict__ grad_up) {
  using P = Pack<T, K>;
  ForEachChunk<K>(n, [&](int64_t base) {
    if (base + K <= n) {
      const P dy = *reinterpret_cast<const P*>(grad + base);
      const P g = *reinterpret_cast<const P*>(gate + base);
      const P u = *reinterpret_cast<const P*>(up + base);
      P dg;
      P du;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const SwiGluGrads d =
            SwiGluElementBackward(ToFloat(dy.v[k]), ToFloat(g.v[k]), ToFloat(u.v[k]));
        dg.v[k] = FromFloat<T>(d.gate);
        du.v[k] = FromFloat<T>(d.up);
      }
      *reinterpret_cast<P*>(grad_gate + base) = dg;
      *reinterpret_cast<P*>(grad_up + base) = du;
    } else {
      for (int64_t i = base; i < n; ++i) {
        const SwiGluGrads d =
            SwiGluElementBackward(ToFloat(grad[i]), ToFloat(gate[i]), ToFloat(up[i]));
        grad_gate[i] = FromFloat<T>(d.gate);
        grad_up[i] = FromFloat<T>(d.up);
      }
    }
  });
}

}  // namespace

cudaError_t LaunchSwiGluForward(KernelDtype dtype, const void* gate, const void* up, int64_t n,
                                void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return LaunchInChunks<T>({gate, up, out}, [&](auto chunk) {
      constexpr int K = decltype(chunk)::value;
      SwiGluForwardKernel<T, K><<<Blocks((n + K - 1) / K), kThreads, 0, stream>>>(
          static_cast<const T*>(gate), static_cast<const T*>(up), n, static_cast<T*>(out));
      return cudaGetLastError();
    });
  });
}

cudaError_t LaunchSwiGluBackward(KernelDtype dtype, const void* grad, const void* gate,
                                 const void* up, int64_t n, void* grad_gate, void* grad_up,
                                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return LaunchInChunks<T>({grad, gate, up, grad_gate, grad_up}, [&](auto chunk) {
      constexpr int K = decltype(chunk)::value;
      SwiGluBackwardKernel<T, K><<<Blocks((n + K - 1) / K), kThreads, 0, stream>>>(
          static_cast<const T*>(grad), static_cast<const T*>(gate), static_cast<const T*>(up), n,
          static_cast<T*>(grad_gate), static_cast<T*>(grad_up));
      return cudaGetLastError();
    });
  });
}

}  // namespace titan
