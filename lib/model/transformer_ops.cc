#include "lib/model/transformer_ops.h"

#include "lib/kernels/swiglu.h"

namespace titan {

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // On GPU, ATen's fused kernel (one pass, fp32 accumulation), which needs matching dtypes:
  // qk-norm under autocast gets bf16 heads and an fp32 weight, so the weight (head_dim elements)
  // is cast and the heads stay bf16, as torchtitan's F.rms_norm returns them, instead of six
  // passes and fp32 heads for RoPE. Elsewhere the reference's op sequence. Not run here (no GPU).
  if (x.is_cuda()) return at::rms_norm(x, {x.size(-1)}, weight.to(x.scalar_type()), eps);
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

at::Tensor SwiGlu(const at::Tensor& gate, const at::Tensor& up) {
  // One pass each way, and the backward keeps gate and up only (not silu(gate) as well).
  if (gate.is_cuda() && FusedSwiGluSupports(gate, up).ok()) return FusedSwiGlu(gate, up);
  return at::silu(gate) * up;
}

}  // namespace titan
