#ifndef TITAN_LIB_KERNELS_ADAM_H_
#define TITAN_LIB_KERNELS_ADAM_H_

#include <ATen/ATen.h>

#include "absl/status/status.h"

namespace titan {

// One parameter group's Adam settings, as the optimizer holds them.
struct AdamSettings {
  double lr = 0;
  double beta1 = 0;
  double beta2 = 0;
  double eps = 0;
  double weight_decay = 0;
  bool decoupled = true;  // AdamW
};

// OK when FusedAdamStep takes these aligned lists: fp32, contiguous tensors of matching sizes on
// one sm_90 GPU (parameters not inference tensors) (fp32 step counts there too), the CUDA kernels
// not turned off, and `grad_scale` undefined or one fp32 there.
absl::Status FusedAdamSupports(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                               at::TensorList exp_avg_sqs, at::TensorList steps,
                               const at::Tensor& grad_scale);

// One Adam(W) step in place, with torch 2.11's CUDA _fused_adam(w)_ math (the steps already
// advanced, as torch advances them first), each gradient first multiplied by `grad_scale` (an fp32
// scalar on the device, e.g. the clipping scale; undefined: 1) as _foreach_mul_ would: the same
// bits as _foreach_mul_ then _fused_adamw_, in one pass over all tensors. The gradients are left
// as they were; what is written has its version counter advanced, as ATen's in-place ops do.
// `bf16_copies`: empty, or one per parameter, undefined or a contiguous bf16 tensor of its size
// that receives the updated parameter's param.to(bf16) bits in the same pass. Throws c10::Error on
// what FusedAdamSupports refuses, and on a copy that is not such a tensor.
void FusedAdamStep(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                   at::TensorList exp_avg_sqs, at::TensorList steps, const AdamSettings& settings,
                   const at::Tensor& grad_scale, at::TensorList bf16_copies = {});

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_ADAM_H_
