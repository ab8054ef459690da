#ifndef TITAN_LIB_MODEL_ATTENTION_H_
#define TITAN_LIB_MODEL_ATTENTION_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace titan {

// What a query may attend to, built once per batch by the decoder and shared by every block.
// Either plain causal (query i sees keys 0..i of the same length: SDPA's is_causal fast path) or
// `allowed`, a bool [B, 1, Sq, Sk] (attention turns it into an additive bias in its compute
// dtype, with the lowest finite value where masked, so a padding row that sees nothing stays
// finite).
struct AttentionMask {
  bool is_causal = true;
  at::Tensor allowed;
};

// Which tokens see which, as the decoder describes a batch to BuildAttentionMask.
struct MaskInputs {
  at::Tensor query_positions;  // [B, Sq] int64
  at::Tensor key_positions;    // [B, Sk] int64
  at::Tensor key_valid;        // [B, Sk] bool; undefined: every key is real (no padding)
  at::Tensor query_documents;  // [B, Sq] int64; undefined: no document masking
  at::Tensor key_documents;    // [B, Sk] int64
};
// A key is visible when it is real, not after the query's position, and (with documents) in the
// query's document.
AttentionMask BuildAttentionMask(const MaskInputs& inputs);

// Keys and values of earlier tokens for decoding, one slot per layer, with each cached token's
// position, document and validity so masks cover prompt padding and packed documents alike.
class KvCache {
 public:
  // Room for `max_len` tokens of `batch` sequences in each of `num_layers` layers.
  KvCache(int64_t num_layers, int64_t batch, int64_t max_len, int64_t kv_heads, int64_t head_dim,
          const at::TensorOptions& options);

  // Tokens already cached (every layer holds the same number between forwards).
  int64_t length() const { return length_; }
  int64_t max_len() const { return max_len_; }
  int64_t batch() const { return batch_; }
  // Forgets every cached token (the storage is kept).
  void Reset() { length_ = 0; }

  // Writes this forward's keys/values [B, H, S, D] of `layer` after the cached ones and returns
  // all of them so far (views [B, H, length() + S, D]), in k's dtype (the layer's cache converts
  // to it if it differs).
  std::pair<at::Tensor, at::Tensor> Append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
  // Records the new tokens' positions, validity and documents ([B, S]; documents may be
  // undefined) and returns the key side of the mask over cached + new tokens. Call once per
  // forward, before the layers run.
  MaskInputs AddTokens(const at::Tensor& positions, const at::Tensor& valid,
                       const at::Tensor& documents);
  // After every layer has appended: the new tokens become part of the cache.
  void Commit(int64_t new_tokens) { length_ += new_tokens; }

 private:
  int64_t batch_;
  int64_t max_len_;
  int64_t length_ = 0;
  std::vector<at::Tensor> keys_;    // [B, H, max_len, D] per layer
  std::vector<at::Tensor> values_;
  at::Tensor positions_;  // [B, max_len] int64
  at::Tensor valid_;      // [B, max_len] bool
  at::Tensor documents_;  // [B, max_len] int64
};

// Scaled dot-product attention (softmax(q kᵀ / √D + mask) v) on q [B, Hq, Sq, D], k and v
// [B, Hkv, Sk, D] with Hq a multiple of Hkv (grouped-query attention): [B, Hq, Sq, D].
// Under grad mode its forward and backward are explicit kernel pairs (so op-level selective
// activation checkpointing can keep the output and recompute only the cheap ops around it).
at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const AttentionMask& mask);

// The pieces Attention runs, for backends that merge partial attention over blocks of keys (ring
// attention): the additive form of a mask in `dtype` (none for plain causal), grouped-query heads
// repeated to the query heads, and the kernels (flash on CPU, memory-efficient on CUDA) that
// return the rows' logsumexp ([B, H, Sq], fp32) and take it back in backward (equal head counts).
std::optional<at::Tensor> AttentionBias(const AttentionMask& mask, at::ScalarType dtype);
at::Tensor RepeatKvHeads(const at::Tensor& x, int64_t n_rep);
std::pair<at::Tensor, at::Tensor> AttentionKernelForward(const at::Tensor& q, const at::Tensor& k,
                                                         const at::Tensor& v,
                                                         const std::optional<at::Tensor>& bias,
                                                         bool is_causal);
std::tuple<at::Tensor, at::Tensor, at::Tensor> AttentionKernelBackward(
    const at::Tensor& grad, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& bias,
    bool is_causal);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_ATTENTION_H_
