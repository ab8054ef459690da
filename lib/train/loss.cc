#include "lib/train/loss.h"

namespace titan {

LossFn CrossEntropySum(double label_smoothing) {
  return [label_smoothing](const at::Tensor& logits, const Batch& batch) {
    return at::cross_entropy_loss(logits.flatten(0, 1).to(at::kFloat), batch.labels.flatten(),
                                  /*weight=*/{}, at::Reduction::Sum, kIgnoreIndex,
                                  label_smoothing);
  };
}

int64_t CountedTokens(const at::Tensor& labels) {
  return labels.ne(kIgnoreIndex).sum().item<int64_t>();
}

at::Tensor DocumentIds(const at::Tensor& tokens, int64_t bos_id) {
  return tokens.eq(bos_id).cumsum(/*dim=*/1);
}

}  // namespace titan
