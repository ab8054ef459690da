#include "lib/profiling/counting_allocator.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <cstring>

namespace titan {
namespace {

CountingCpuAllocator* g_counter = nullptr;
std::once_flag g_install;

}  // namespace

CountingCpuAllocator* CountingCpuAllocator::Install() {
  std::call_once(g_install, [] {
    g_counter = new CountingCpuAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(g_counter, /*priority=*/100);
  });
  return g_counter;
}

c10::DataPtr CountingCpuAllocator::allocate(size_t n) {
  void* data = base_->raw_allocate(n);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[data] = n;
    live_ += static_cast<int64_t>(n);
    peak_ = std::max(peak_, live_);
  }
  return {data, data, &Free, c10::Device(c10::DeviceType::CPU)};
}

void CountingCpuAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

int64_t CountingCpuAllocator::live() {
  std::lock_guard<std::mutex> lock(mutex_);
  return live_;
}

int64_t CountingCpuAllocator::peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

void CountingCpuAllocator::ResetPeak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_ = live_;
}

void CountingCpuAllocator::Free(void* data) {
  {
    std::lock_guard<std::mutex> lock(g_counter->mutex_);
    auto it = g_counter->sizes_.find(data);
    g_counter->live_ -= static_cast<int64_t>(it->second);
    g_counter->sizes_.erase(it);
  }
  g_counter->base_->raw_deallocate(data);
}

}  // namespace titan
