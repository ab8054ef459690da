#include "lib/model/transformer_ops.h"

namespace titan {

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

}  // namespace titan
