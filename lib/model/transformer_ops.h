#ifndef TITAN_LIB_MODEL_TRANSFORMER_OPS_H_
#define TITAN_LIB_MODEL_TRANSFORMER_OPS_H_

#include <ATen/ATen.h>

namespace titan {

// x * rsqrt(mean(x^2) + eps) * weight over the last dim, computed in fp32 and cast back (as
// Llama's and Qwen's references).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_TRANSFORMER_OPS_H_
