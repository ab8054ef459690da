#ifndef TITAN_LIB_TRAIN_CHUNKED_CROSS_ENTROPY_H_
#define TITAN_LIB_TRAIN_CHUNKED_CROSS_ENTROPY_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>

namespace titan {

// A weight holding rows [first_id, first_id + rows) of a vocabulary split over ranks (tensor
// parallelism's output head). The reductions run in place over the ranks sharing the vocabulary.
struct VocabShard {
  int64_t first_id = 0;
  std::function<void(at::Tensor&)> all_reduce_max;
  std::function<void(at::Tensor&)> all_reduce_sum;
};

// Cross-entropy of the output projection, sum(CE(hidden @ weightᵀ, labels)) over labels that are
// not kIgnoreIndex, computed `chunk_rows` rows at a time in fp32: the [tokens, vocab] logits (2 GiB
// per 4096 tokens at a 128k vocabulary) are never held whole, in forward or backward. hidden
// [N, D], weight [V, D], labels [N] int64. When a backward follows and N >= D, both gradients are
// computed chunk by chunk in the forward and kept in fp32 ([N, D] + [V, D], no more than the
// [N, V] logits) until backward scales them: the three matmuls of the unfused head. Otherwise
// backward recomputes each chunk's logits from the saved log-sum-exp (one more matmul, nothing
// kept but the inputs). Gradients flow to hidden and weight in their own dtypes, each only when
// asked for. With `shard`, weight holds a slice of the vocabulary: the log-sum-exp and the label's
// logit are reduced over its ranks (three all-reduces of N floats, or two per chunk when the
// gradients are computed in the forward), and hidden's gradient is this rank's partial sum
// (tensor parallelism's region hook adds them up).
at::Tensor ChunkedLinearCrossEntropySum(const at::Tensor& hidden, const at::Tensor& weight,
                                        const at::Tensor& labels, int64_t chunk_rows = 1024,
                                        const VocabShard* shard = nullptr);

// Each token's cross-entropy lse(z) - z[label] with z = logit_scale · (hidden @ weightᵀ), [N] (0
// where the label is kIgnoreIndex), `chunk_rows` rows at a time likewise, for losses that weigh
// each token (RL: its negation is the label's log-probability at temperature 1 / logit_scale).
// Backward, given a gradient per token, recomputes each chunk's logits. `entropy` (optional,
// without autograd): each row's entropy of softmax(z), [N]. One rank's whole vocabulary.
at::Tensor ChunkedLinearCrossEntropyPerToken(const at::Tensor& hidden, const at::Tensor& weight,
                                             const at::Tensor& labels, double logit_scale = 1.0,
                                             int64_t chunk_rows = 1024,
                                             at::Tensor* entropy = nullptr);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_CHUNKED_CROSS_ENTROPY_H_
