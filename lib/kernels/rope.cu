// RoPE in one pass: each thread rotates pairs of x (rope_math.h) read and written once, a row
// (one head of one token) at a time.
#include "lib/kernels/cuda_dtype.cuh"
#include "lib/kernels/launch.h"
#include "lib/kernels/rope_math.h"

namespace titan {
namespace {

template <typename T>
__global__ void RopeKernel(const T* __restrict__ x, const float* __restrict__ cos,
                           const float* __restrict__ sin, RopeDims dims, float sin_sign,
                           T* __restrict__ out) {
  const int64_t rows = dims.rows();
  const int64_t half = dims.head_dim / 2;
  for (int64_t row = FirstRow(); row < rows; row += RowStride()) {
    const RopeRowStart start = RopeRowStartOf(row, dims);
    const T* x_row = x + start.x;
    T* out_row = out + start.x;
    for (int64_t j = FirstInRow(); j < half; j += InRowStride()) {
      const RopePairInRow pair = RopePairOf(j, dims);
      const RotatedPair r = RotatePair(ToFloat(x_row[pair.first]), ToFloat(x_row[pair.second]),
                                       cos[start.angle + j], sin_sign * sin[start.angle + j]);
      out_row[pair.first] = FromFloat<T>(r.first);
      out_row[pair.second] = FromFloat<T>(r.second);
    }
  }
}

}  // namespace

cudaError_t LaunchRope(KernelDtype dtype, const void* x, const float* cos, const float* sin,
                       const RopeDims& dims, bool inverse, void* out, cudaStream_t stream) {
  if (dims.rows() == 0 || dims.head_dim / 2 == 0) return cudaSuccess;
  const RowLaunch launch = RowsLaunch(dims.rows(), dims.head_dim / 2);
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    RopeKernel<T><<<launch.grid, launch.block, 0, stream>>>(
        static_cast<const T*>(x), cos, sin, dims, inverse ? -1.0f : 1.0f, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace titan
