#ifndef TITAN_LIB_KERNELS_CUDA_HOST_EMULATION_H_
#define TITAN_LIB_KERNELS_CUDA_HOST_EMULATION_H_

// Runs titan's CUDA kernels on the CPU, so that their indexing, tiling, barriers and reductions
// are executed here and not only read (this machine has no GPU). Included first (-include) into a
// kernel source whose launches `K<<<grid, block, shared, stream>>>(args);` the BUILD's genrule
// rewrote as `EmulateLaunch(grid, block, [&] { K(args); });`. Each block's threads are real
// threads (blocks one after another): __syncthreads is a barrier of the block, __shared__ a static
// (one block at a time uses it), a warp shuffle an exchange among the warp's 32 lanes. Device
// pointers are host pointers; the BUILD compiles the kernels with UBSan's alignment check, so a
// misaligned vector access (a fault on the GPU) ends the test. What it cannot tell: speed, device
// math (expf and friends are the host's), register or shared-memory limits.
// Hand-written: no library emulates CUDA on a CPU for LibTorch-built code.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace titan_emu {

// C++20's std::barrier, in C++17 (LibTorch's headers are built as that here).
class Barrier {
 public:
  explicit Barrier(int count) : expected_(count) {}
  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t phase = phase_;
    if (++arrived_ >= expected_) {
      Advance();
    } else {
      changed_.wait(lock, [&] { return phase_ != phase; });
    }
  }
  // For a thread leaving for good: it no longer counts.
  void ArriveAndDrop() {
    std::lock_guard<std::mutex> lock(mutex_);
    --expected_;
    if (arrived_ > 0 && arrived_ >= expected_) Advance();
  }

 private:
  void Advance() {
    arrived_ = 0;
    ++phase_;
    changed_.notify_all();
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  int expected_;
  int arrived_ = 0;
  uint64_t phase_ = 0;
};

struct Warp {
  explicit Warp(int lanes) : barrier(lanes) {}
  Barrier barrier;
  uint64_t slots[32] = {};
};

struct Block {
  explicit Block(int threads) : barrier(threads) {
    for (int first = 0; first < threads; first += 32) {
      warps.push_back(std::make_unique<Warp>(std::min(32, threads - first)));
    }
  }
  Barrier barrier;
  std::vector<std::unique_ptr<Warp>> warps;
};

inline thread_local uint3 thread_idx;
inline thread_local uint3 block_idx;
inline thread_local Block* block = nullptr;
inline thread_local int linear_thread = 0;
inline dim3 grid_dim;
inline dim3 block_dim;
inline thread_local cudaError_t last_error = cudaSuccess;

inline cudaError_t TakeLastError() {
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}

// What the GPU would refuse at launch: more than 1024 threads a block, a grid's y or z past 65535.
inline bool ValidLaunch(dim3 grid, dim3 threads) {
  const uint64_t per_block = uint64_t{threads.x} * threads.y * threads.z;
  return per_block >= 1 && per_block <= 1024 && threads.z <= 64 && grid.x >= 1 && grid.y >= 1 &&
         grid.z >= 1 && grid.y <= 65535 && grid.z <= 65535 && grid.x <= 0x7fffffffu;
}

template <typename Body>
void EmulateLaunch(dim3 grid, dim3 threads, const Body& body) {
  if (!ValidLaunch(grid, threads)) {
    last_error = cudaErrorInvalidConfiguration;
    return;
  }
  grid_dim = grid;
  block_dim = threads;
  const int count = static_cast<int>(threads.x * threads.y * threads.z);
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) {
        Block shared_state(count);
        std::vector<std::thread> workers;
        workers.reserve(count);
        for (int t = 0; t < count; ++t) {
          workers.emplace_back([&, t] {
            block_idx = make_uint3(x, y, z);
            thread_idx =
                make_uint3(t % threads.x, (t / threads.x) % threads.y, t / (threads.x * threads.y));
            block = &shared_state;
            linear_thread = t;
            body();
            // An exited thread no longer counts at barriers, as on the GPU.
            shared_state.warps[t / 32]->barrier.ArriveAndDrop();
            shared_state.barrier.ArriveAndDrop();
          });
        }
        for (std::thread& worker : workers) worker.join();
      }
    }
  }
}

inline void SyncThreads() { block->barrier.ArriveAndWait(); }

template <typename T>
T ShuffleXor(T value, int lane_mask) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "one register");
  Warp& warp = *block->warps[linear_thread / 32];
  const int lane = linear_thread % 32;
  std::memcpy(&warp.slots[lane], &value, sizeof(T));
  warp.barrier.ArriveAndWait();
  T other;
  std::memcpy(&other, &warp.slots[lane ^ lane_mask], sizeof(T));
  warp.barrier.ArriveAndWait();  // nobody overwrites a slot before every lane read
  return other;
}

}  // namespace titan_emu

// CUDA's qualifiers and built-ins, for host code.
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __shared__
#define __shared__ static
#define threadIdx (::titan_emu::thread_idx)
#define blockIdx (::titan_emu::block_idx)
#define gridDim (::titan_emu::grid_dim)
#define blockDim (::titan_emu::block_dim)
#define __syncthreads() ::titan_emu::SyncThreads()
#define __shfl_xor_sync(mask, value, lane_mask) ::titan_emu::ShuffleXor(value, lane_mask)
#define cudaGetLastError() ::titan_emu::TakeLastError()
using ::titan_emu::EmulateLaunch;

template <typename T>
inline T __ldcs(const T* p) {
  return *p;
}

#endif  // TITAN_LIB_KERNELS_CUDA_HOST_EMULATION_H_
