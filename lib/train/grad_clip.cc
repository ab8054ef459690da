#include "lib/train/grad_clip.h"

#include <c10/core/GradMode.h>

namespace titan {
namespace {

std::vector<at::Tensor> DefinedGrads(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> grads;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  return grads;
}

}  // namespace

GradClip ComputeGradClip(const std::vector<at::Tensor>& params, double max_norm,
                         const SquaredNormReducer& reduce) {
  c10::NoGradGuard no_grad;
  const std::vector<at::Tensor> grads = DefinedGrads(params);
  // As torch.nn.utils.clip_grad_norm_: one foreach kernel on CUDA, a norm per tensor on CPU (where
  // torch has no foreach path), so both devices match torch bit for bit.
  std::vector<at::Tensor> grad_norms =
      !grads.empty() && grads.front().is_cuda() ? at::_foreach_norm(grads, 2)
                                                : std::vector<at::Tensor>();
  if (grad_norms.empty()) {
    for (const at::Tensor& g : grads) grad_norms.push_back(at::linalg_vector_norm(g, 2));
  }
  // The reducer weighs squares per parameter: one entry per parameter, 0 without a gradient.
  std::vector<at::Tensor> norms;
  size_t next = 0;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) {
      norms.push_back(grad_norms[next++].to(at::kFloat));
    } else if (reduce) {
      norms.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
    }
  }
  if (norms.empty()) return {at::zeros({}, at::kFloat), at::Tensor()};
  at::Tensor total;
  if (reduce) {
    // Shards: the squares add up across ranks.
    total = reduce(at::stack(norms).pow(2)).sqrt();
  } else {
    // torch.nn.utils.clip_grad_norm_'s own reduction, so one process clips by the same bits.
    total = at::linalg_vector_norm(at::stack(norms), 2);
  }
  if (max_norm <= 0 || grads.empty()) return {total, at::Tensor()};
  // Python's max_norm / tensor is reciprocal, then multiply (Tensor.__rdiv__): two roundings.
  return {total, (total + 1e-6).reciprocal().mul(max_norm).clamp_max(1.0)};
}

void ScaleGrads(const std::vector<at::Tensor>& params, const at::Tensor& scale) {
  if (!scale.defined()) return;
  c10::NoGradGuard no_grad;
  const std::vector<at::Tensor> grads = DefinedGrads(params);
  if (!grads.empty()) at::_foreach_mul_(grads, scale);
}

}  // namespace titan
