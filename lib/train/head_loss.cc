#include "lib/train/head_loss.h"

namespace titan {

at::Tensor HeadLoss::Forward(const Decoder& model, const at::Tensor& hidden,
                             const Batch& batch) const {
  return fused ? fused(model.HeadInput(hidden), model.OutputWeight(), batch) : model.Head(hidden);
}

at::Tensor HeadLoss::Sum(const at::Tensor& forward_out, const Batch& batch) const {
  return fused ? forward_out : logits(forward_out, batch);
}

}  // namespace titan
