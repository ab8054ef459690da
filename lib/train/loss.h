#ifndef TITAN_LIB_TRAIN_LOSS_H_
#define TITAN_LIB_TRAIN_LOSS_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace titan {

// Labels equal to this take no part in the loss (prompt tokens in SFT, padding).
inline constexpr int64_t kIgnoreIndex = -100;

// One microbatch, [B, S] each on the training device. Optional fields stay undefined.
struct Batch {
  at::Tensor tokens;     // int64 inputs
  at::Tensor labels;     // int64 next-token targets; kIgnoreIndex: not counted
  at::Tensor positions;  // int64 RoPE positions; undefined: 0 .. S-1
  at::Tensor documents;  // int64 document ids for document-causal masking; undefined: causal
  // Per-token inputs of losses that need more than labels (RL: advantages, old and reference
  // log-probabilities), by name.
  std::map<std::string, at::Tensor> extra;
};

// The loss of a microbatch as a sum over its counted tokens (fp32 scalar): the trainer divides by
// the number of counted tokens of the whole step, across microbatches and data-parallel ranks, so
// microbatches of different sizes weigh by their tokens (torchtitan's global-valid-token
// normalisation). RL and DPO losses plug in here.
using LossFn = std::function<at::Tensor(const at::Tensor& logits, const Batch& batch)>;

// Cross-entropy over the vocabulary, summed over tokens whose label is not kIgnoreIndex, in fp32;
// label_smoothing as torch.nn.functional.cross_entropy's. On an sm_90 GPU without smoothing,
// titan's fused kernels (lib/kernels/cross_entropy.h; [compile] fused_kernels).
LossFn CrossEntropySum(double label_smoothing = 0);

// Labels [N] as rows of a vocabulary slice [first_id, first_id + rows) (tensor parallelism's
// shard of the head): `index` (0 where the label is elsewhere), `here` (counted and in the
// slice) and `counted` (not kIgnoreIndex).
struct LocalLabels {
  at::Tensor index;
  at::Tensor here;
  at::Tensor counted;
};
LocalLabels LocalizeLabels(const at::Tensor& labels, int64_t first_id, int64_t rows);

// `batch` cut along dim 0 into `parts` microbatches of equal size (every field, `extra` too).
std::vector<Batch> SplitBatch(const Batch& batch, int64_t parts);

// Tokens whose label counts, as an int64 scalar on the labels' device (no host sync).
at::Tensor CountedTokensOnDevice(const at::Tensor& labels);
// The same read to the host (a host sync: call once per microbatch, before the step).
int64_t CountedTokens(const at::Tensor& labels);

// Document ids of packed windows for block_causal masking; tokens before the window's first
// boundary belong to the document it cut, id 0. With a BOS a document starts at each BOS; without
// one (Qwen's layout) documents are only ended by EOS, so one starts after each EOS, as in
// torchtitan's get_document_mask_mod.
at::Tensor DocumentIds(const at::Tensor& tokens, std::optional<int64_t> bos_id, int64_t eos_id);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_LOSS_H_
