#ifndef TITAN_LIB_TESTING_COUNTING_ALLOCATOR_H_
#define TITAN_LIB_TESTING_COUNTING_ALLOCATOR_H_

#include <c10/core/Allocator.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

namespace titan {

// The CPU allocator, wrapped to count live and peak bytes: tests and benchmarks see what a piece
// of code holds between two points (activations kept for backward, a loss's peak). Install() makes
// it LibTorch's CPU allocator for the rest of the process.
class CountingAllocator : public c10::Allocator {
 public:
  // The process's one instance, installed on first use.
  static CountingAllocator& Install();

  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override { return &Free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  int64_t live();
  int64_t peak();
  // Starts a new peak measurement from the bytes live now.
  void ResetPeak();

 private:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  static void Free(void* data);

  c10::Allocator* base_;
  std::mutex mutex_;
  // The data pointer is its own context (kernels that call raw_allocate need that), so sizes are
  // kept here.
  std::unordered_map<void*, size_t> sizes_;
  int64_t live_ = 0;
  int64_t peak_ = 0;
};

}  // namespace titan

#endif  // TITAN_LIB_TESTING_COUNTING_ALLOCATOR_H_
