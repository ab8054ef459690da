#include "lib/testing/counting_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>

namespace titan {

CountingAllocator& CountingAllocator::Install() {
  static CountingAllocator* instance = [] {
    auto* allocator = new CountingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(allocator, /*priority=*/100);
    return allocator;
  }();
  return *instance;
}

c10::DataPtr CountingAllocator::allocate(size_t n) {
  void* data = base_->raw_allocate(n);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[data] = n;
    live_ += static_cast<int64_t>(n);
    peak_ = std::max(peak_, live_);
  }
  return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
}

void CountingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

int64_t CountingAllocator::live() {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_;
}

int64_t CountingAllocator::peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

void CountingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = live_;
}

void CountingAllocator::Free(void* data) {
  CountingAllocator& self = Install();
  {
    std::lock_guard<std::mutex> lock(self.mutex_);
    auto it = self.sizes_.find(data);
    self.live_ -= static_cast<int64_t>(it->second);
    self.sizes_.erase(it);
  }
  self.base_->raw_deallocate(data);
}

}  // namespace titan
