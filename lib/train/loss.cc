#include "lib/train/loss.h"

#include "lib/kernels/cross_entropy.h"

namespace titan {

LossFn CrossEntropySum(double label_smoothing) {
  return [label_smoothing](const at::Tensor& logits, const Batch& batch) {
    const at::Tensor rows = logits.flatten(0, 1);
    const at::Tensor labels = batch.labels.flatten();
    // On GPUs titan's kernels: one pass each way, no fp32 copy of the logits (the CPU keeps
    // ATen's ops, torch's bits).
    if (label_smoothing == 0 && rows.is_cuda() && FusedCrossEntropySupports(rows, labels).ok()) {
      return FusedCrossEntropySum(rows, labels, kIgnoreIndex);
    }
    return at::cross_entropy_loss(rows.to(at::kFloat), labels, /*weight=*/{}, at::Reduction::Sum,
                                  kIgnoreIndex, label_smoothing);
  };
}

std::vector<Batch> SplitBatch(const Batch& batch, int64_t parts) {
  auto pieces = [parts](const at::Tensor& tensor) {
    return tensor.defined() ? tensor.chunk(parts, 0) : std::vector<at::Tensor>(parts);
  };
  const std::vector<at::Tensor> tokens = pieces(batch.tokens);
  const std::vector<at::Tensor> labels = pieces(batch.labels);
  const std::vector<at::Tensor> positions = pieces(batch.positions);
  const std::vector<at::Tensor> documents = pieces(batch.documents);
  std::vector<Batch> out(parts);
  for (int64_t i = 0; i < parts; ++i) {
    out[i].tokens = tokens[i];
    out[i].labels = labels[i];
    out[i].positions = positions[i];
    out[i].documents = documents[i];
  }
  for (const auto& [name, tensor] : batch.extra) {
    const std::vector<at::Tensor> extra = pieces(tensor);
    for (int64_t i = 0; i < parts; ++i) out[i].extra[name] = extra[i];
  }
  return out;
}

at::Tensor CountedTokensOnDevice(const at::Tensor& labels) {
  return labels.ne(kIgnoreIndex).sum();
}

int64_t CountedTokens(const at::Tensor& labels) {
  return CountedTokensOnDevice(labels).item<int64_t>();
}

at::Tensor DocumentIds(const at::Tensor& tokens, std::optional<int64_t> bos_id, int64_t eos_id) {
  if (bos_id.has_value()) return tokens.eq(*bos_id).cumsum(/*dim=*/1);
  const at::Tensor ends = tokens.eq(eos_id).to(at::kLong);
  return ends.cumsum(/*dim=*/1) - ends;
}

LocalLabels LocalizeLabels(const at::Tensor& labels, int64_t first_id, int64_t rows) {
  const at::Tensor index = labels - first_id;
  const at::Tensor counted = labels.ne(kIgnoreIndex);
  const at::Tensor here = counted.logical_and(index.ge(0)).logical_and(index.lt(rows));
  return {index.masked_fill(here.logical_not(), 0), here, counted};
}

}  // namespace titan
