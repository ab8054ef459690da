// RoPE in one pass: each thread rotates pairs of x (rope_math.h) read and written once.
#include "lib/kernels/cuda_dtype.cuh"
#include "lib/kernels/launch.h"
#include "lib/kernels/rope_math.h"

namespace titan {
namespace {

template <typename T>
__global__ void RopeKernel(const T* __restrict__ x, const float* __restrict__ cos,
                           const float* __restrict__ sin, RopeDims dims, float sin_sign,
                           T* __restrict__ out) {
  const int64_t pairs = dims.pairs();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += stride) {
    const RopeOffsets at = RopePairOffsets(p, dims);
    const RotatedPair r = RotatePair(ToFloat(x[at.first]), ToFloat(x[at.second]), cos[at.angle],
                                     sin_sign * sin[at.angle]);
    out[at.first] = FromFloat<T>(r.first);
    out[at.second] = FromFloat<T>(r.second);
  }
}

}  // namespace

cudaError_t LaunchRope(KernelDtype dtype, const void* x, const float* cos, const float* sin,
                       const RopeDims& dims, bool inverse, void* out, cudaStream_t stream) {
  const int64_t pairs = dims.pairs();
  if (pairs == 0) return cudaSuccess;
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    RopeKernel<T><<<Blocks(pairs), kThreads, 0, stream>>>(
        static_cast<const T*>(x), cos, sin, dims, inverse ? -1.0f : 1.0f, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace titan
