#ifndef TITAN_LIB_TRAIN_DEVICE_H_
#define TITAN_LIB_TRAIN_DEVICE_H_

#include <ATen/ATen.h>

#include <string>

namespace titan {

// cuda:<local_rank> when LibTorch sees a GPU, else the CPU.
at::Device PickDevice(int local_rank);

// On a GPU, before the first allocation: the caching allocator's expandable segments (as
// torchtitan's launcher sets them; less fragmentation with changing activation sizes) unless
// PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF says otherwise, and SDPA's backend order cuDNN,
// flash, efficient, math on sm_90+ (cuDNN's attention is the fastest there). With
// `deterministic` (algorithms already set so): cuDNN deterministic without autotuning, as
// torchtitan sets it (cuBLAS's deterministic workspace, CUBLAS_WORKSPACE_CONFIG, is set earlier by
// RunJobOnThisRank). Logs the choices.
void ConfigureCudaRuntime(const at::Device& device, bool deterministic);

// Peak memory this process used on `device` since start, in GiB: the caching allocator's peak
// reserved bytes on a GPU, the peak resident set on the CPU.
double PeakMemoryGiB(const at::Device& device);

// Human-readable device name for logs and the MFU peak table ("NVIDIA H200", "cpu").
std::string DeviceName(const at::Device& device);

// `device`'s datasheet peak FLOP/s for MFU in the matmuls' dtype: bf16 under autocast, else fp32
// (PeakFlops; 0: unknown, no MFU reported).
double MatmulPeakFlops(const at::Device& device, bool autocast);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_DEVICE_H_
