// The float8 cast in one pass (float8_cast_math.h): ATen's composition reads and writes the tensor
// four times (to fp32, times the scale, clamp, to float8).
#include <cuda_fp8.h>

#include <algorithm>

#include "lib/kernels/cuda_dtype.cuh"
#include "lib/kernels/float8_cast_math.h"
#include "lib/kernels/launch.h"

namespace titan {
namespace {

template <typename T>
__global__ void ScaledCastKernel(const T* __restrict__ x, const float* __restrict__ scale,
                                 int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                                 __nv_fp8_interpretation_t format, float max,
                                 __nv_fp8_storage_t* __restrict__ out) {
  for (int64_t row = FirstRow(); row < rows; row += RowStride()) {
    const T* x_row = x + row * cols;
    __nv_fp8_storage_t* out_row = out + row * cols;
    for (int64_t col = FirstInRow(); col < cols; col += InRowStride()) {
      const float s = scale[ScaleIndex(row, col, row_stride, col_stride)];
      // Round to nearest even, as LibTorch's casts; saturation already happened.
      out_row[col] =
          __nv_cvt_float_to_fp8(ScaleSaturate(ToFloat(x_row[col]), s, max), __NV_SATFINITE, format);
    }
  }
}

// The cast written twice from one read: row-major into `out`, column-major into `out_t`
// ([cols, rows] row-major). A 32 x 32 tile goes through shared memory so that both writes, and
// the read, run along contiguous memory.
constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;

template <typename T>
__global__ void ScaledCastBothLayoutsKernel(const T* __restrict__ x,
                                            const float* __restrict__ scale, int64_t rows,
                                            int64_t cols, int64_t row_stride, int64_t col_stride,
                                            __nv_fp8_interpretation_t format, float max,
                                            __nv_fp8_storage_t* __restrict__ out,
                                            __nv_fp8_storage_t* __restrict__ out_t) {
  __shared__ __nv_fp8_storage_t tile[kTile][kTile + 4];
  const int64_t tile_col = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t tile_row = static_cast<int64_t>(blockIdx.y) * kTile; tile_row < rows;
       tile_row += static_cast<int64_t>(gridDim.y) * kTile) {
    for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
      const int64_t row = tile_row + i, col = tile_col + threadIdx.x;
      if (row < rows && col < cols) {
        const float s = scale[ScaleIndex(row, col, row_stride, col_stride)];
        const __nv_fp8_storage_t v = __nv_cvt_float_to_fp8(
            ScaleSaturate(ToFloat(x[row * cols + col]), s, max), __NV_SATFINITE, format);
        out[row * cols + col] = v;
        tile[i][threadIdx.x] = v;
      }
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
      const int64_t col = tile_col + i, row = tile_row + threadIdx.x;
      if (row < rows && col < cols) out_t[col * rows + row] = tile[threadIdx.x][i];
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t LaunchScaledCastToFloat8BothLayouts(KernelDtype dtype, const void* x,
                                                const float* scale, int64_t rows, int64_t cols,
                                                int64_t scale_row_stride, int64_t scale_col_stride,
                                                Float8KernelDtype out_dtype, float max, void* out,
                                                void* out_t, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const __nv_fp8_interpretation_t format =
      out_dtype == Float8KernelDtype::kE4m3fn ? __NV_E4M3 : __NV_E5M2;
  const int64_t col_tiles = (cols + kTile - 1) / kTile;
  if (col_tiles > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(col_tiles),
                  static_cast<unsigned>(std::min<int64_t>((rows + kTile - 1) / kTile, 65535)));
  const dim3 block(kTile, kTileRowsPerPass);
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ScaledCastBothLayoutsKernel<T><<<grid, block, 0, stream>>>(
        static_cast<const T*>(x), scale, rows, cols, scale_row_stride, scale_col_stride, format,
        max, static_cast<__nv_fp8_storage_t*>(out), static_cast<__nv_fp8_storage_t*>(out_t));
    return cudaGetLastError();
  });
}

cudaError_t LaunchScaledCastToFloat8(KernelDtype dtype, const void* x, const float* scale,
                                     int64_t rows, int64_t cols, int64_t scale_row_stride,
                                     int64_t scale_col_stride, Float8KernelDtype out_dtype,
                                     float max, void* out, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const __nv_fp8_interpretation_t format =
      out_dtype == Float8KernelDtype::kE4m3fn ? __NV_E4M3 : __NV_E5M2;
  const RowLaunch launch = RowsLaunch(rows, cols);
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ScaledCastKernel<T><<<launch.grid, launch.block, 0, stream>>>(
        static_cast<const T*>(x), scale, rows, cols, scale_row_stride, scale_col_stride, format,
        max, static_cast<__nv_fp8_storage_t*>(out));
    return cudaGetLastError();
  });
}

}  // namespace titan
