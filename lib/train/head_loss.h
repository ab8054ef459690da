#ifndef TITAN_LIB_TRAIN_HEAD_LOSS_H_
#define TITAN_LIB_TRAIN_HEAD_LOSS_H_

#include <ATen/ATen.h>

#include <functional>

#include "lib/model/decoder.h"
#include "lib/train/loss.h"

namespace titan {

// A head and loss in one, from what the output projection would read (Decoder::HeadInput,
// [B, S, D]) and its weight (Decoder::OutputWeight): the loss summed over counted tokens, without
// the [tokens, vocab] logits ever held whole (ChunkedLinearCrossEntropySum).
using FusedHeadLossFn = std::function<at::Tensor(const at::Tensor& head_input,
                                                 const at::Tensor& weight, const Batch& batch)>;

// What the last decoder stage's output becomes: the output head's logits into `logits`, or with
// `fused` set, the fused head and loss. The fused one runs inside the forward (where FSDP holds
// the gathered head weight); a loss on logits runs after it, as before.
struct HeadLoss {
  LossFn logits;
  FusedHeadLossFn fused;

  // Inside the forward, on the last block's output: the logits, or the fused loss sum.
  at::Tensor Forward(const Decoder& model, const at::Tensor& hidden, const Batch& batch) const;
  // After the forward, on Forward's result: the microbatch's loss sum.
  at::Tensor Sum(const at::Tensor& forward_out, const Batch& batch) const;
};

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_HEAD_LOSS_H_
