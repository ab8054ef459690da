#include "lib/profiling/tracking_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>

namespace titan {

TrackingAllocator& TrackingAllocator::Install() {
  static TrackingAllocator* instance = [] {
    auto* allocator = new TrackingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(allocator, /*priority=*/100);
    return allocator;
  }();
  return *instance;
}

c10::DataPtr TrackingAllocator::allocate(size_t n) {
  void* data = base_->raw_allocate(n);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[data] = n;
    live_ += static_cast<int64_t>(n);
    peak_ = std::max(peak_, live_);
    if (observer_ != nullptr) observer_->OnAllocate(data, static_cast<int64_t>(n));
  }
  return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
}

void TrackingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

int64_t TrackingAllocator::live() {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_;
}

int64_t TrackingAllocator::peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

void TrackingAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = live_;
}

void TrackingAllocator::SetObserver(AllocationObserver* observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  observer_ = observer;
}

void TrackingAllocator::Free(void* data) {
  TrackingAllocator& self = Install();
  {
    std::lock_guard<std::mutex> lock(self.mutex_);
    auto it = self.sizes_.find(data);
    const auto bytes = static_cast<int64_t>(it->second);
    self.live_ -= bytes;
    self.sizes_.erase(it);
    if (self.observer_ != nullptr) self.observer_->OnFree(data, bytes);
  }
  self.base_->raw_deallocate(data);
}

}  // namespace titan
