#include "lib/train/grad_clip.h"

#include <c10/core/GradMode.h>

namespace titan {

at::Tensor ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm,
                        const SquaredNormReducer& reduce) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> norms;
  for (const at::Tensor& p : params) {
    if (p.grad().defined()) {
      norms.push_back(at::linalg_vector_norm(p.grad(), 2).to(at::kFloat));
    } else if (reduce) {
      norms.push_back(at::zeros({}, p.options().dtype(at::kFloat)));  // keeps the order
    }
  }
  if (norms.empty()) return at::zeros({}, at::kFloat);
  at::Tensor total;
  if (reduce) {
    // Shards: the squares add up across ranks.
    total = reduce(at::stack(norms).pow(2)).sqrt();
  } else {
    // torch.nn.utils.clip_grad_norm_'s own reduction, so one process clips by the same bits.
    total = at::linalg_vector_norm(at::stack(norms), 2);
  }
  if (max_norm > 0) {
    at::Tensor scale = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (const at::Tensor& p : params) {
      if (p.grad().defined()) p.grad().mul_(scale.to(p.grad().scalar_type()));
    }
  }
  return total;
}

}  // namespace titan
