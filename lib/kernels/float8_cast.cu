// The float8 cast in one pass (float8_cast_math.h): ATen's composition reads and writes the tensor
// four times (to fp32, times the scale, clamp, to float8).
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "lib/kernels/cuda_dtype.cuh"
#include "lib/kernels/float8_cast_math.h"
#include "lib/kernels/launch.h"

namespace titan {
namespace {

using Float8 = __nv_fp8_storage_t;

// Elements col .. col + K - 1 of row `row` cast to float8: one scale load unless the scale varies
// along the row (per-column scales). Round to nearest even, as LibTorch's casts; saturation
// already happened.
template <typename T, int K>
__device__ __forceinline__ Pack<Float8, K> CastVector(const Pack<T, K>& in,
                                                      const float* __restrict__ scale, int64_t row,
                                                      int64_t col, int64_t row_stride,
                                                      int64_t col_stride,
                                                      __nv_fp8_interpretation_t format, float max) {
  Pack<Float8, K> out;
  float s = scale[ScaleIndex(row, col, row_stride, col_stride)];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (col_stride != 0 && k > 0) s = scale[ScaleIndex(row, col + k, row_stride, col_stride)];
    out.v[k] =
        __nv_cvt_float_to_fp8(ScaleSaturate(ToFloat(in.v[k]), s, max), __NV_SATFINITE, format);
  }
  return out;
}

// K consecutive elements a thread an access (K divides cols: LaunchRowsInChunks' 16-byte loads, K
// bytes stored), or one.
template <typename T, int K>
__global__ void ScaledCastKernel(const T* __restrict__ x, const float* __restrict__ scale,
                                 int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                                 __nv_fp8_interpretation_t format, float max,
                                 __nv_fp8_storage_t* __restrict__ out) {
  const int64_t chunks = cols / K;
  for (int64_t row = FirstRow(); row < rows; row += RowStride()) {
    const auto* x_row = reinterpret_cast<const Pack<T, K>*>(x + row * cols);
    auto* out_row = reinterpret_cast<Pack<Float8, K>*>(out + row * cols);
    for (int64_t chunk = FirstInRow(); chunk < chunks; chunk += InRowStride()) {
      out_row[chunk] = CastVector<T, K>(x_row[chunk], scale, row, chunk * K, row_stride, col_stride,
                                        format, max);
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

// The same from 8-element vectors, for dims that are multiples of 8 with aligned pointers (every
// matmul operand of a Llama layer): 16-byte loads, 8-byte stores into both layouts, and a 64 x 64
// tile a 256-thread block. The 32 x 32 kernel above moves one element a thread an access.
constexpr int kWideTile = 64;
constexpr int kWideThreads = 256;
constexpr int kVector = 8;
constexpr int kVectorsPerTileRow = kWideTile / kVector;
constexpr int kSlotsPerThread = kWideTile * kVectorsPerTileRow / kWideThreads;
static_assert(kSlotsPerThread * kWideThreads == kWideTile * kVectorsPerTileRow, "whole slots");

template <typename T>
__global__ void __launch_bounds__(kWideThreads)
    ScaledCastBothLayoutsWideKernel(const T* __restrict__ x, const float* __restrict__ scale,
                                    int64_t rows, int64_t cols, int64_t row_stride,
                                    int64_t col_stride, __nv_fp8_interpretation_t format, float max,
                                    __nv_fp8_storage_t* __restrict__ out,
                                    __nv_fp8_storage_t* __restrict__ out_t) {
  // Rows padded to 68 bytes: word-aligned vector halves, fewer bank conflicts down a column.
  __shared__ __align__(16) __nv_fp8_storage_t tile[kWideTile][kWideTile + 4];
  const int64_t tile_col = static_cast<int64_t>(blockIdx.x) * kWideTile;
  for (int64_t tile_row = static_cast<int64_t>(blockIdx.y) * kWideTile; tile_row < rows;
       tile_row += static_cast<int64_t>(gridDim.y) * kWideTile) {
    // Read: slot = (tile row, vector in it); all loads first, so they are in flight together.
    Pack<T, kVector> in[kSlotsPerThread];
#pragma unroll
    for (int i = 0; i < kSlotsPerThread; ++i) {
      const int slot = threadIdx.x + i * kWideThreads;
      const int64_t row = tile_row + slot / kVectorsPerTileRow;
      const int64_t col = tile_col + (slot % kVectorsPerTileRow) * kVector;
      if (row < rows && col < cols)
        in[i] = *reinterpret_cast<const Pack<T, kVector>*>(x + row * cols + col);
    }
#pragma unroll
    for (int i = 0; i < kSlotsPerThread; ++i) {
      const int slot = threadIdx.x + i * kWideThreads;
      const int r = slot / kVectorsPerTileRow, c = (slot % kVectorsPerTileRow) * kVector;
      const int64_t row = tile_row + r, col = tile_col + c;
      if (row >= rows || col >= cols) continue;
      const Pack<Float8, kVector> cast =
          CastVector<T, kVector>(in[i], scale, row, col, row_stride, col_stride, format, max);
      *reinterpret_cast<Pack<Float8, kVector>*>(out + row * cols + col) = cast;
      // Tile rows are 4-byte aligned: the 8 bytes as two words.
      const uint2 words = *reinterpret_cast<const uint2*>(&cast);
      *reinterpret_cast<uint32_t*>(&tile[r][c]) = words.x;
      *reinterpret_cast<uint32_t*>(&tile[r][c + 4]) = words.y;
    }
    __syncthreads();
    // Write the transpose: slot = (tile column, 8 rows of it), 8 bytes of a row of out_t.
#pragma unroll
    for (int i = 0; i < kSlotsPerThread; ++i) {
      const int slot = threadIdx.x + i * kWideThreads;
      const int c = slot / kVectorsPerTileRow, r = (slot % kVectorsPerTileRow) * kVector;
      const int64_t row = tile_row + r, col = tile_col + c;
      if (row >= rows || col >= cols) continue;
      Pack<Float8, kVector> column;
#pragma unroll
      for (int k = 0; k < kVector; ++k) column.v[k] = tile[r + k][c];
      *reinterpret_cast<Pack<Float8, kVector>*>(out_t + col * rows + row) = column;
    }
    __syncthreads();
  }
}

template <typename T>
__global__ void ScalesFromAmaxKernel(const T* __restrict__ amax, int64_t n, double max,
                                     float* __restrict__ scale, float* __restrict__ inverse_scale) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float s = Float8ScaleFromAmax(static_cast<double>(ToFloat(amax[i])), max);
  scale[i] = s;
  inverse_scale[i] = 1.0f / s;  // IEEE division, as ATen's reciprocal (no fast math here)
}

}  // namespace

cudaError_t LaunchFloat8ScalesFromAmax(KernelDtype dtype, const void* amax, int64_t n, double max,
                                       float* scale, float* inverse_scale, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  constexpr int kThreadsPerBlock = 256;
  const int64_t blocks = (n + kThreadsPerBlock - 1) / kThreadsPerBlock;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    ScalesFromAmaxKernel<T><<<static_cast<unsigned>(blocks), kThreadsPerBlock, 0, stream>>>(
        static_cast<const T*>(amax), n, max, scale, inverse_scale);
    return cudaGetLastError();
  });
}

cudaError_t LaunchScaledCastToFloat8BothLayouts(KernelDtype dtype, const void* x,
                                                const float* scale, int64_t rows, int64_t cols,
                                                int64_t scale_row_stride, int64_t scale_col_stride,
                                                Float8KernelDtype out_dtype, float max, void* out,
                                                void* out_t, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const __nv_fp8_interpretation_t format =
      out_dtype == Float8KernelDtype::kE4m3fn ? __NV_E4M3 : __NV_E5M2;
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // Whole 8-element vectors in every row of both outputs, at aligned addresses.
    const bool wide = rows % kVector == 0 && cols % kVector == 0 &&
                      AlignedTo(x, alignof(Pack<T, kVector>)) && AlignedTo(out, 8) &&
                      AlignedTo(out_t, 8);
    const int tile = wide ? kWideTile : kTile;
    const int64_t col_tiles = (cols + tile - 1) / tile;
    if (col_tiles > 0x7fffffff) return cudaErrorInvalidValue;
    const dim3 grid(static_cast<unsigned>(col_tiles),
                    static_cast<unsigned>(std::min<int64_t>((rows + tile - 1) / tile, 65535)));
    if (wide) {
      ScaledCastBothLayoutsWideKernel<T><<<grid, kWideThreads, 0, stream>>>(
          static_cast<const T*>(x), scale, rows, cols, scale_row_stride, scale_col_stride, format,
          max, static_cast<__nv_fp8_storage_t*>(out), static_cast<__nv_fp8_storage_t*>(out_t));
      return cudaGetLastError();
    }
    const dim3 block(kTile, kTileRowsPerPass);
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
  return DispatchDtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return LaunchRowsInChunks<T>(
        {x, out}, cols, [&](auto chunk) {
          constexpr int K = decltype(chunk)::value;
          const RowLaunch launch = RowsLaunch(rows, cols / K);
          ScaledCastKernel<T, K><<<launch.grid, launch.block, 0, stream>>>(
              static_cast<const T*>(x), scale, rows, cols, scale_row_stride, scale_col_stride,
              format, max, static_cast<__nv_fp8_storage_t*>(out));
          return cudaGetLastError();
        });
  });
}

}  // namespace titan
