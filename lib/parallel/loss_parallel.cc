#include "lib/parallel/loss_parallel.h"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include "lib/parallel/collectives.h"
#include "lib/train/chunked_cross_entropy.h"

namespace titan {

LossFn VocabParallelCrossEntropySum(Communicator* tp, double label_smoothing) {
  return [tp, label_smoothing](const at::Tensor& logits, const Batch& batch) {
    const at::Tensor local = logits.flatten(0, 1).to(at::kFloat);  // [N, V / tp]
    const at::Tensor labels = batch.labels.flatten();
    const int64_t shard = local.size(1);
    const int64_t vocab = shard * tp->size();
    at::Tensor max;
    {
      // Any constant per row gives the same loss: the shift carries no gradient.
      c10::NoGradGuard no_grad;
      max = std::get<0>(local.max(/*dim=*/1, /*keepdim=*/true));
      const absl::Status status = Await(tp->AllReduce(max, ReduceOp::kMax));
      TORCH_CHECK(status.ok(), "vocab-parallel loss: ", status.ToString());
    }
    const at::Tensor shifted = local - max;
    const at::Tensor log_sum_exp = SumOverRegion(shifted.exp().sum(1), tp).log();
    const LocalLabels labels_here = LocalizeLabels(labels, tp->rank() * shard, shard);
    const at::Tensor target = shifted.gather(1, labels_here.index.unsqueeze(1)).squeeze(1);
    at::Tensor loss =
        log_sum_exp - SumOverRegion(target.masked_fill(labels_here.here.logical_not(), 0.0), tp);
    if (label_smoothing > 0) {
      // torch's smoothing: the mean over the vocabulary of -log p, weighted label_smoothing.
      const at::Tensor mean_log_p =
          SumOverRegion(shifted.sum(1), tp) / static_cast<double>(vocab) - log_sum_exp;
      loss = (1 - label_smoothing) * loss - label_smoothing * mean_log_p;
    }
    return loss.masked_fill(labels_here.counted.logical_not(), 0.0).sum();
  };
}

FusedHeadLossFn ChunkedCrossEntropySum(int64_t chunk_tokens, Communicator* tp) {
  return [chunk_tokens, tp](const at::Tensor& head_input, const at::Tensor& weight,
                            const Batch& batch) {
    const at::Tensor hidden = head_input.flatten(0, 1);
    const at::Tensor labels = batch.labels.flatten();
    if (tp == nullptr) return ChunkedLinearCrossEntropySum(hidden, weight, labels, chunk_tokens);
    auto reduce = [tp](ReduceOp op) {
      return [tp, op](at::Tensor& t) {
        const absl::Status status = Await(tp->AllReduce(t, op));
        TORCH_CHECK(status.ok(), "vocab-parallel fused loss: ", status.ToString());
      };
    };
    VocabShard shard;
    shard.first_id = tp->rank() * weight.size(0);
    shard.all_reduce_max = reduce(ReduceOp::kMax);
    shard.all_reduce_sum = reduce(ReduceOp::kSum);
    return ChunkedLinearCrossEntropySum(hidden, weight, labels, chunk_tokens, &shard);
  };
}

}  // namespace titan
