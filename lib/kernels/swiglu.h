#ifndef TITAN_LIB_KERNELS_SWIGLU_H_
#define TITAN_LIB_KERNELS_SWIGLU_H_

#include <ATen/ATen.h>

#include "absl/status/status.h"

namespace titan {

// OK when FusedSwiGlu takes these tensors: gate and up of one shape and one dtype (fp32, bf16 or
// fp16) on one device, the CPU or an sm_90 GPU.
absl::Status FusedSwiGluSupports(const at::Tensor& gate, const at::Tensor& up);

// silu(gate) * up in fp32, rounded once to the inputs' dtype, in one pass: the CUDA kernel on a
// GPU, the same math (swiglu_math.h) in a loop on the CPU (the reference the tests hold against
// at::silu(gate) * up). Its backward is one pass too and keeps only gate and up (ATen's composition
// also keeps silu(gate)); it is first-order (not differentiable again). Throws c10::Error on what
// FusedSwiGluSupports refuses.
at::Tensor FusedSwiGlu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_SWIGLU_H_
