#ifndef TITAN_LIB_KERNELS_CUDA_DTYPE_CUH_
#define TITAN_LIB_KERNELS_CUDA_DTYPE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <utility>

#include "lib/kernels/launch.h"

// Device-side helpers of the kernels: element loads and stores through fp32, and launch shapes.

namespace titan {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

// Round to nearest even, as LibTorch's casts from fp32.
template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

template <typename T>
struct TypeTag {
  using type = T;
};

// f(TypeTag<T>{}) with T the CUDA element type of `dtype`.
template <typename F>
cudaError_t DispatchDtype(KernelDtype dtype, F&& f) {
  switch (dtype) {
    case KernelDtype::kFloat32:
      return f(TypeTag<float>{});
    case KernelDtype::kBFloat16:
      return f(TypeTag<__nv_bfloat16>{});
    case KernelDtype::kFloat16:
      return f(TypeTag<__half>{});
  }
  return cudaErrorInvalidValue;
}

// Grid-stride loops: a few waves of blocks on an H200 (132 SMs), each thread taking every
// (blocks * threads)-th element after that.
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;
inline int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// Row loops over a [rows, row_length] problem: a block is blockDim.y rows of blockDim.x threads
// (row_length rounded up to a warp, at most kThreads), so a kernel works out where a row starts
// once a row (divisions included) and walks its elements with additions alone. Few long rows
// (a float8 cast of an FSDP shard) are also split over gridDim.y, so the grid still has about
// kMinBlocks blocks to spread over the SMs.
struct RowLaunch {
  dim3 grid;
  dim3 block;
};
constexpr int64_t kMinBlocks = 1024;  // about 8 blocks per SM of an H200
inline RowLaunch RowsLaunch(int64_t rows, int64_t row_length) {
  const int per_row =
      static_cast<int>(std::clamp<int64_t>((row_length + 31) / 32 * 32, 32, kThreads));
  const int rows_per_block = kThreads / per_row;
  const int64_t row_blocks =
      std::min<int64_t>((rows + rows_per_block - 1) / rows_per_block, kMaxBlocks);
  const int64_t most_splits = std::max<int64_t>(1, (row_length + per_row - 1) / per_row);
  const int64_t splits = std::clamp<int64_t>(kMinBlocks / row_blocks, 1, most_splits);
  return {dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(splits)),
          dim3(per_row, rows_per_block)};
}

// This thread's first row of a row loop, and the rows between its successive ones.
__device__ __forceinline__ int64_t FirstRow() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
}
__device__ __forceinline__ int64_t RowStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.y;
}
// This thread's first element of a row, and the elements between its successive ones.
__device__ __forceinline__ int64_t FirstInRow() {
  return static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t InRowStride() {
  return static_cast<int64_t>(gridDim.y) * blockDim.x;
}

// K consecutive elements, loaded and stored as one access: 16 bytes (one 128-bit instruction)
// when K = 16 / sizeof(T) and the addresses are 16-byte aligned.
template <typename T, int K>
struct alignas(sizeof(T) * K) Pack {
  T v[K];
};

// Whether `p` sits on a multiple of `bytes` (what a vector access of that size needs).
inline bool AlignedTo(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// 16-byte chunks when every pointer allows them (a view at an odd offset does not) and
// `chunks_fit`, else one element a thread; `launch` gets the chunk size as a template argument.
template <typename T, typename F>
cudaError_t LaunchInChunks(std::initializer_list<const void*> pointers, F&& launch,
                           bool chunks_fit = true) {
  constexpr int kWide = 16 / sizeof(T);
  bool wide = chunks_fit;
  for (const void* p : pointers) wide = wide && AlignedTo(p, 16);
  return wide ? launch(std::integral_constant<int, kWide>{})
              : launch(std::integral_constant<int, 1>{});
}

// LaunchInChunks over row-major rows of `row_length` elements: chunks where rows are whole ones.
template <typename T, typename F>
cudaError_t LaunchRowsInChunks(std::initializer_list<const void*> pointers, int64_t row_length,
                               F&& launch) {
  return LaunchInChunks<T>(pointers, std::forward<F>(launch), row_length % (16 / sizeof(T)) == 0);
}

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_CUDA_DTYPE_CUH_
