#ifndef TITAN_LIB_KERNELS_ROPE_H_
#define TITAN_LIB_KERNELS_ROPE_H_

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "lib/kernels/rope_math.h"

namespace titan {

// OK when FusedRope takes these tensors: x [B, S, H, D] (D even) in fp32, bf16 or fp16; cos and
// sin [B or 1, S, 1, D / 2] in fp32 on x's device, not requiring grad; the CPU or an sm_90 GPU.
absl::Status FusedRopeSupports(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// x rotated pair by pair (rope_math.h) in fp32 and cast back to x's dtype, in one pass: the CUDA
// kernel on a GPU, the same math in a loop on the CPU (the reference the tests hold against
// ApplyRope). Differentiable in x to any order: the backward is the rotation by -angle. Throws
// c10::Error on what FusedRopeSupports refuses.
at::Tensor FusedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     RopePairing pairing);

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_ROPE_H_
