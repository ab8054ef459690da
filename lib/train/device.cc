#include "lib/train/device.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "lib/metrics/flops.h"

namespace titan {

at::Device PickDevice(int local_rank) {
  if (at::hasCUDA() && at::cuda::device_count() > 0) {
    const int index = local_rank % at::cuda::device_count();
    c10::cuda::set_device(index);
    return at::Device(at::kCUDA, index);
  }
  return at::Device(at::kCPU);
}

double PeakMemoryGiB(const at::Device& device) {
  if (device.is_cuda()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    return static_cast<double>(stats.reserved_bytes[aggregate].peak) / (1 << 30);
  }
  return PeakRssGiB();
}

std::string DeviceName(const at::Device& device) {
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
  return "cpu";
}

}  // namespace titan
