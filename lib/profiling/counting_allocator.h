#ifndef TITAN_LIB_PROFILING_COUNTING_ALLOCATOR_H_
#define TITAN_LIB_PROFILING_COUNTING_ALLOCATOR_H_

#include <c10/core/Allocator.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace titan {

// Wraps LibTorch's CPU allocator to count the bytes it hands out, live and at their peak: CPU
// memory figures (activations, say) the way CUDA's allocator statistics give them on a GPU. The
// data pointer is its own context (some kernels allocate through raw_allocate, which needs that),
// so sizes are kept in a table.
class CountingCpuAllocator : public c10::Allocator {
 public:
  // Makes the counter this process's CPU allocator (once; later calls return it). Tensors
  // allocated before are not counted, nor their release.
  static CountingCpuAllocator* Install();

  int64_t live();
  int64_t peak();
  // Starts a new peak from the live bytes now.
  void ResetPeak();

  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {}
  static void Free(void* data);

  c10::Allocator* base_;
  std::mutex mutex_;
  std::unordered_map<void*, size_t> sizes_;
  int64_t live_ = 0;
  int64_t peak_ = 0;
};

}  // namespace titan

#endif  // TITAN_LIB_PROFILING_COUNTING_ALLOCATOR_H_
