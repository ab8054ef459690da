#ifndef TITAN_LIB_TRAIN_DEVICE_H_
#define TITAN_LIB_TRAIN_DEVICE_H_

#include <ATen/ATen.h>

#include <string>

namespace titan {

// cuda:<local_rank> when LibTorch sees a GPU, else the CPU.
at::Device PickDevice(int local_rank);

// Peak memory this process used on `device` since start, in GiB: the caching allocator's peak
// reserved bytes on a GPU, the peak resident set on the CPU.
double PeakMemoryGiB(const at::Device& device);

// Human-readable device name for logs and the MFU peak table ("NVIDIA H200", "cpu").
std::string DeviceName(const at::Device& device);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_DEVICE_H_
