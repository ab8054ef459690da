#ifndef TITAN_LIB_PARALLEL_LOSS_PARALLEL_H_
#define TITAN_LIB_PARALLEL_LOSS_PARALLEL_H_

#include <cstdint>

#include "lib/distributed/communicator.h"
#include "lib/train/head_loss.h"
#include "lib/train/loss.h"

namespace titan {

// CrossEntropySum(label_smoothing) on logits whose last dimension is this rank's slice of the
// vocabulary (rank r of `tp` holds ids [r·V/tp, (r+1)·V/tp)): the row maximum, the sum of
// exponentials, the target's logit (and with smoothing the logits' sum) are reduced over `tp`, so
// no rank ever holds the whole logits. Every rank returns the same loss; each gets the gradient of
// its own slice. `tp` must outlive the graphs.
LossFn VocabParallelCrossEntropySum(Communicator* tp, double label_smoothing = 0);

// The output head and the cross-entropy fused ([training] loss_chunk_size):
// ChunkedLinearCrossEntropySum over `chunk_tokens` tokens at a time. With `tp` (the head's weight
// split over its ranks by vocabulary rows, as above) the reductions run over it; null: the weight
// is the whole vocabulary.
FusedHeadLossFn ChunkedCrossEntropySum(int64_t chunk_tokens, Communicator* tp = nullptr);

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_LOSS_PARALLEL_H_
