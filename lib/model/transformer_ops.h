#ifndef TITAN_LIB_MODEL_TRANSFORMER_OPS_H_
#define TITAN_LIB_MODEL_TRANSFORMER_OPS_H_

#include <ATen/ATen.h>

namespace titan {

// x * rsqrt(mean(x^2) + eps) * weight over the last dim, computed in fp32 and cast back (as
// Llama's and Qwen's references). On GPU the result has x's dtype (ATen's fused kernel, the
// weight cast to x's dtype where it differs).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// silu(gate) * up: on an H100/H200 the fused kernel (lib/kernels/swiglu.h) when it takes the
// tensors, ATen's two ops elsewhere.
at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_TRANSFORMER_OPS_H_
