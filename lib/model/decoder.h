#ifndef TITAN_LIB_MODEL_DECODER_H_
#define TITAN_LIB_MODEL_DECODER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "lib/model/attention.h"
#include "lib/model/module.h"
#include "lib/model/rope.h"
#include "lib/model/transformer_args.h"

namespace titan {

// The slice of the model a process builds: a pipeline stage owns layers [first_layer, end_layer)
// and maybe the embedding (first stage) or the final norm and output head (last stage). Parameter
// names and initialisation stay those of the whole model ("layers.17...." is layer 17 anywhere).
struct DecoderPart {
  int64_t first_layer = 0;
  int64_t end_layer = -1;  // -1: every layer from first_layer on
  bool embedding = true;
  bool head = true;
};

// What a batch says beyond its tokens ([B, S] each; undefined fields take their defaults).
struct DecoderInputs {
  at::Tensor positions;  // int64; default 0 .. S-1 (after the cached tokens when decoding)
  at::Tensor valid;      // bool; false marks padding, which no query attends to; default all true
  at::Tensor documents;  // int64 document ids; set: queries attend only within their document
  KvCache* kv_cache = nullptr;  // decoding: keys/values of earlier tokens, extended in place
};

struct BatchContext;

// Where parallelize code puts its communication, as data: an unset hook is the identity (one
// process). Tensor parallelism sets Megatron's f/g operators (or sequence parallelism's
// all-gather / reduce-scatter along the sequence) at the region boundaries and looks tokens up in
// its vocabulary shard; context parallelism replaces the attention kernel (ring attention).
struct ParallelHooks {
  using Hook = std::function<at::Tensor(const at::Tensor&)>;
  // The embedding lookup of `tokens` [B, S] in `table`; unset: at::embedding.
  std::function<at::Tensor(const at::Tensor& table, const at::Tensor& tokens)> embed;
  // Into attention, the feed-forward and the output projection (after their norms).
  Hook region_in;
  // Out of attention and the feed-forward (before the residual add), and out of the embedding.
  Hook region_out;
  // On the output projection's logits.
  Hook logits;
  // Replaces Attention(q, k, v, batch.mask) (q [B, Hq, S, D], k and v [B, Hkv, S, D]); the batch's
  // positions, documents and validity are in batch.mask_inputs and no mask is built.
  std::function<at::Tensor(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const BatchContext& batch)>
      attention;
};

// The attention context every block of one forward shares (built once per batch).
struct BatchContext {
  RopeRotation rope;
  AttentionMask mask;
  MaskInputs mask_inputs;  // with an attention hook: what the mask would be built from
  KvCache* kv_cache = nullptr;
  const ParallelHooks* hooks = nullptr;  // null: no parallelism
};

class DecoderAttention : public Module {
 public:
  DecoderAttention(const TransformerArgs& args, const at::TensorOptions& options);
  // `cache_slot`: this layer's slot in the batch's KV cache.
  at::Tensor Forward(const at::Tensor& x, const BatchContext& batch, int64_t cache_slot) const;
  void InitWeights(double out_std);

 private:
  int64_t head_dim_;
  double norm_eps_;
  at::Tensor& wq_;
  at::Tensor& wk_;
  at::Tensor& wv_;
  at::Tensor& wo_;
  const LinearFn& wq_fn_;
  const LinearFn& wk_fn_;
  const LinearFn& wv_fn_;
  const LinearFn& wo_fn_;
  at::Tensor* q_norm_ = nullptr;  // qk-norm only
  at::Tensor* k_norm_ = nullptr;
};

class DecoderFeedForward : public Module {
 public:
  DecoderFeedForward(const TransformerArgs& args, const at::TensorOptions& options);
  at::Tensor Forward(const at::Tensor& x) const;  // w2(silu(w1 x) · w3 x)
  void InitWeights(double out_std);

 private:
  at::Tensor& w1_;
  at::Tensor& w2_;
  at::Tensor& w3_;
  const LinearFn& w1_fn_;
  const LinearFn& w2_fn_;
  const LinearFn& w3_fn_;
};

class DecoderBlock : public Module {
 public:
  DecoderBlock(int64_t layer_id, const TransformerArgs& args, const at::TensorOptions& options);
  at::Tensor Forward(const at::Tensor& x, const BatchContext& batch, int64_t cache_slot) const;
  void InitWeights();
  int64_t layer_id() const { return layer_id_; }

 private:
  int64_t layer_id_;
  double norm_eps_;
  at::Tensor& attention_norm_;
  at::Tensor& ffn_norm_;
  DecoderAttention* attention_;
  DecoderFeedForward* feed_forward_;
};

// One decoder-only transformer for every dense family (Llama 3, Qwen3, ...): embedding, blocks
// of RMSNorm → attention (GQA, optional qk-norm, RoPE) and RMSNorm → SwiGLU with residuals, final
// norm, output head (optionally tied to the embedding). Parameter names are torchtitan's. It knows
// nothing of parallelism: parallelize code wraps each block's call (SetLayerWrapper) and owns
// slices of it through DecoderPart.
class Decoder : public Module {
 public:
  using LayerCall = std::function<at::Tensor(const at::Tensor&)>;
  using LayerWrapper = std::function<at::Tensor(const LayerCall&, const at::Tensor&)>;

  // `options` may name the meta device: nothing is allocated until Materialize().
  Decoder(const TransformerArgs& args, const at::TensorOptions& options,
          const DecoderPart& part = {});

  // tokens [B, S] int64 -> logits [B, S, vocab]; needs the embedding and the head.
  at::Tensor Forward(const at::Tensor& tokens, const DecoderInputs& inputs = {});
  // Forward without the head: the last block's output [B, S, D] (before the final norm).
  at::Tensor ForwardHidden(const at::Tensor& tokens, const DecoderInputs& inputs = {});

  // The pieces Forward chains, for pipeline stages and fused losses.
  at::Tensor Embed(const at::Tensor& tokens) const;
  BatchContext PrepareBatch(int64_t batch, int64_t seq_len, const DecoderInputs& inputs);
  at::Tensor RunLayers(at::Tensor hidden, const BatchContext& batch);
  at::Tensor FinalNorm(const at::Tensor& hidden) const;
  // What the output projection reads: FinalNorm, then into the head's region (tensor
  // parallelism: the whole sequence, replicated); fused losses take it with OutputWeight().
  at::Tensor HeadInput(const at::Tensor& hidden) const;
  at::Tensor Head(const at::Tensor& hidden) const;  // HeadInput then the output projection
  // The output projection's weight (the embedding when tied).
  const at::Tensor& OutputWeight() const;

  // torchtitan's initialisation, on materialised parameters: InitEmbedding, each
  // layer, InitHead. FSDP runs them group by group, sharding in between, and draws the same
  // random numbers as one process. Also builds the RoPE tables.
  void InitWeights();
  void InitEmbedding();
  void InitLayer(int64_t layer_id);
  void InitHead();
  // RoPE tables on `options`' device (InitWeights calls this; loading a checkpoint needs it too).
  void BuildRopeTables(const at::TensorOptions& options);

  // `layer_id` is global (as in parameter names); the wrapper runs around that block's call.
  void SetLayerWrapper(int64_t layer_id, LayerWrapper wrapper);
  // Parallelize code sets these before the first forward.
  ParallelHooks& parallel_hooks() { return hooks_; }
  // The global ids of the layers this part holds, in order.
  std::vector<int64_t> layer_ids() const;
  const TransformerArgs& args() const { return args_; }
  const DecoderPart& part() const { return part_; }

 private:
  // The untied head's init (std dim^-0.5, truncated at ±3σ), which a tied table takes too.
  void InitAsHead(at::Tensor& weight) const;

  DecoderBlock* Block(int64_t layer_id) const;

  const TransformerArgs args_;
  DecoderPart part_;
  at::Tensor* tok_embeddings_ = nullptr;  // first part only (or tied)
  std::vector<DecoderBlock*> layers_;
  std::vector<LayerWrapper> wrappers_;
  ParallelHooks hooks_;
  at::Tensor* norm_ = nullptr;    // last part only
  at::Tensor* output_ = nullptr;  // last part, untied only
  const LinearFn* output_fn_ = nullptr;  // last part
  RopeTables rope_;
};

}  // namespace titan

#endif  // TITAN_LIB_MODEL_DECODER_H_
