#include "lib/train/device.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/AllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <glog/logging.h>

#include <cstdlib>
#include <vector>

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

void ConfigureCudaRuntime(const at::Device& device, bool deterministic) {
  if (!device.is_cuda()) return;
  if (deterministic) {
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
    // RunJobOnThisRank sets it, unless the environment did.
    const char* workspace = std::getenv("CUBLAS_WORKSPACE_CONFIG");
    LOG(INFO) << "deterministic: CUBLAS_WORKSPACE_CONFIG=" << (workspace ? workspace : "(unset)")
              << ", cuDNN deterministic";
  }
  const char* user = std::getenv("PYTORCH_ALLOC_CONF");
  if (user == nullptr) user = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  if (user == nullptr) {
    c10::CachingAllocator::setAllocatorSettings("expandable_segments:True");
    LOG(INFO) << "CUDA caching allocator: expandable_segments:True";
  } else {
    LOG(INFO) << "CUDA caching allocator: " << user << " (from the environment)";
  }
  // cuDNN attention first where PyTorch itself trusts it (cuDNN newer than 9.15 on Hopper and
  // Blackwell; older ones mishandle sequence lengths not a multiple of 128), unless the user
  // deprioritised it.
  const int major = at::cuda::getDeviceProperties(device.index())->major;
  const long cudnn = at::detail::getCUDAHooks().versionRuntimeCuDNN();
  if ((major == 9 || major == 10) && cudnn > 91500 &&
      std::getenv("TORCH_CUDNN_SDPA_DEPRIORITIZED") == nullptr) {
    const std::vector<int64_t> order = {static_cast<int64_t>(at::SDPBackend::cudnn_attention),
                                        static_cast<int64_t>(at::SDPBackend::flash_attention),
                                        static_cast<int64_t>(at::SDPBackend::efficient_attention),
                                        static_cast<int64_t>(at::SDPBackend::math)};
    at::globalContext().setSDPPriorityOrder(order);
    LOG(INFO) << "SDPA backend order: cudnn, flash, efficient, math (cuDNN " << cudnn << ")";
  } else {
    LOG(INFO) << "SDPA backend order: PyTorch's default (sm_" << major << "x, cuDNN " << cudnn
              << ")";
  }
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

double MatmulPeakFlops(const at::Device& device, bool autocast) {
  const std::string name = DeviceName(device);
  const double peak = PeakFlops(name, autocast ? MatmulDtype::kBfloat16 : MatmulDtype::kFloat32);
  if (peak == 0) {
    LOG(INFO) << "mfu is not reported: no published peak FLOP/s for " << name << " in "
              << (autocast ? "bf16" : "fp32");
  }
  return peak;
}

}  // namespace titan
