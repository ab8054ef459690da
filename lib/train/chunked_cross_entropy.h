#ifndef TITAN_LIB_TRAIN_CHUNKED_CROSS_ENTROPY_H_
#define TITAN_LIB_TRAIN_CHUNKED_CROSS_ENTROPY_H_

#include <ATen/ATen.h>

#include <cstdint>

namespace titan {

// Cross-entropy of the output projection, sum(CE(hidden @ weightᵀ, labels)) over labels that are
// not kIgnoreIndex, computed `chunk_rows` rows at a time in fp32: the [tokens, vocab] logits (2 GiB
// per 4096 tokens at a 128k vocabulary) are never held whole, in forward or backward (backward
// recomputes each chunk's logits from the saved log-sum-exp). hidden [N, D], weight [V, D],
// labels [N] int64. Gradients flow to hidden and weight in their own dtypes.
at::Tensor ChunkedLinearCrossEntropySum(const at::Tensor& hidden, const at::Tensor& weight,
                                        const at::Tensor& labels, int64_t chunk_rows = 1024);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_CHUNKED_CROSS_ENTROPY_H_
