#include "lib/model/decoder.h"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/model/init.h"
#include "lib/model/op_cache.h"
#include "lib/model/transformer_ops.h"

namespace titan {
namespace {

// `hook`(x), or x when no parallelism set the hook.
at::Tensor Apply(const ParallelHooks* hooks, ParallelHooks::Hook ParallelHooks::*hook,
                 const at::Tensor& x) {
  return hooks != nullptr && hooks->*hook ? (hooks->*hook)(x) : x;
}

// torchtitan's init, the same for every family: an untied table N(0, 1); linears N(0, 0.02)
// truncated at ±2 absolute, output projections (wo, w2, w3) 0.02 / sqrt(2·(layer+1))
// (depth_init); the head, and a tied table, std dim^-0.5 truncated at ±3σ.
constexpr double kEmbeddingStd = 1.0;
constexpr double kLinearStd = 0.02;

// torchtitan's trunc_normal_ with torch's default bounds, ±2 absolute.
void InitLinear(at::Tensor& weight, double std) { TruncNormal_(weight, 0.0, std, -2.0, 2.0); }

}  // namespace

DecoderAttention::DecoderAttention(const TransformerArgs& args, const at::TensorOptions& options)
    : head_dim_(args.head_size()),
      norm_eps_(args.norm_eps),
      wq_(RegisterParameter("wq.weight", {args.n_heads * args.head_size(), args.dim}, options)),
      wk_(RegisterParameter("wk.weight", {args.kv_heads() * args.head_size(), args.dim}, options)),
      wv_(RegisterParameter("wv.weight", {args.kv_heads() * args.head_size(), args.dim}, options)),
      wo_(RegisterParameter("wo.weight", {args.dim, args.n_heads * args.head_size()}, options)),
      wq_fn_(RegisterLinear("wq", wq_)),
      wk_fn_(RegisterLinear("wk", wk_)),
      wv_fn_(RegisterLinear("wv", wv_)),
      wo_fn_(RegisterLinear("wo", wo_)) {
  if (args.qk_norm) {
    q_norm_ = &RegisterParameter("q_norm.weight", {args.head_size()}, options);
    k_norm_ = &RegisterParameter("k_norm.weight", {args.head_size()}, options);
  }
}

at::Tensor DecoderAttention::Forward(const at::Tensor& x, const BatchContext& batch,
                                     int64_t cache_slot) const {
  const int64_t b = x.size(0);
  const int64_t s = x.size(1);
  // Head counts come from the weights' shapes: tensor parallelism shards them.
  at::Tensor q = Linear(x, wq_, wq_fn_).view({b, s, -1, head_dim_});
  at::Tensor k = Linear(x, wk_, wk_fn_).view({b, s, -1, head_dim_});
  at::Tensor v = Linear(x, wv_, wv_fn_).view({b, s, -1, head_dim_});
  if (q_norm_ != nullptr) {
    q = RmsNorm(q, *q_norm_, norm_eps_);
    k = RmsNorm(k, *k_norm_, norm_eps_);
  }
  q = ApplyRope(q, batch.rope).transpose(1, 2);
  k = ApplyRope(k, batch.rope).transpose(1, 2);
  v = v.transpose(1, 2);
  if (batch.kv_cache != nullptr) std::tie(k, v) = batch.kv_cache->Append(cache_slot, k, v);
  at::Tensor out = batch.hooks != nullptr && batch.hooks->attention
                       ? batch.hooks->attention(q, k, v, batch)
                       : Attention(q, k, v, batch.mask);
  return Linear(out.transpose(1, 2).reshape({b, s, -1}), wo_, wo_fn_);
}

void DecoderAttention::InitWeights(double out_std) {
  for (at::Tensor* w : {&wq_, &wk_, &wv_}) InitLinear(*w, kLinearStd);
  InitLinear(wo_, out_std);
  if (q_norm_ != nullptr) {
    q_norm_->fill_(1.0);
    k_norm_->fill_(1.0);
  }
}

DecoderFeedForward::DecoderFeedForward(const TransformerArgs& args,
                                       const at::TensorOptions& options)
    : w1_(RegisterParameter("w1.weight", {args.ffn_hidden_dim, args.dim}, options)),
      w2_(RegisterParameter("w2.weight", {args.dim, args.ffn_hidden_dim}, options)),
      w3_(RegisterParameter("w3.weight", {args.ffn_hidden_dim, args.dim}, options)),
      w1_fn_(RegisterLinear("w1", w1_)),
      w2_fn_(RegisterLinear("w2", w2_)),
      w3_fn_(RegisterLinear("w3", w3_)) {}

at::Tensor DecoderFeedForward::Forward(const at::Tensor& x) const {
  // Sequenced: selective checkpointing counts the linears in call order.
  at::Tensor gate = Linear(x, w1_, w1_fn_);
  at::Tensor up = Linear(x, w3_, w3_fn_);
  return Linear(SwiGlu(gate, up), w2_, w2_fn_);
}

void DecoderFeedForward::InitWeights(double out_std) {
  InitLinear(w1_, kLinearStd);
  InitLinear(w2_, out_std);
  InitLinear(w3_, out_std);
}

DecoderBlock::DecoderBlock(int64_t layer_id, const TransformerArgs& args,
                           const at::TensorOptions& options)
    : layer_id_(layer_id),
      norm_eps_(args.norm_eps),
      attention_norm_(RegisterParameter("attention_norm.weight", {args.dim}, options)),
      ffn_norm_(RegisterParameter("ffn_norm.weight", {args.dim}, options)),
      attention_(RegisterModule("attention", std::make_unique<DecoderAttention>(args, options))),
      feed_forward_(
          RegisterModule("feed_forward", std::make_unique<DecoderFeedForward>(args, options))) {}

at::Tensor DecoderBlock::Forward(const at::Tensor& x, const BatchContext& batch,
                                 int64_t cache_slot) const {
  using P = ParallelHooks;
  const P* hooks = batch.hooks;
  const at::Tensor attention_in =
      Apply(hooks, &P::region_in, RmsNorm(x, attention_norm_, norm_eps_));
  const at::Tensor h =
      x + Apply(hooks, &P::region_out, attention_->Forward(attention_in, batch, cache_slot));
  const at::Tensor ffn_in = Apply(hooks, &P::region_in, RmsNorm(h, ffn_norm_, norm_eps_));
  return h + Apply(hooks, &P::region_out, feed_forward_->Forward(ffn_in));
}

void DecoderBlock::InitWeights() {
  const double out_std = kLinearStd / std::sqrt(2.0 * static_cast<double>(layer_id_ + 1));
  c10::NoGradGuard no_grad;
  attention_norm_.fill_(1.0);
  ffn_norm_.fill_(1.0);
  attention_->InitWeights(out_std);
  feed_forward_->InitWeights(out_std);
}

Decoder::Decoder(const TransformerArgs& args, const at::TensorOptions& options,
                 const DecoderPart& part)
    : args_(args), part_(part) {
  if (part_.end_layer < 0) part_.end_layer = args.n_layers;
  TORCH_CHECK(0 <= part_.first_layer && part_.first_layer <= part_.end_layer &&
                  part_.end_layer <= args.n_layers,
              "decoder part: layers [", part_.first_layer, ", ", part_.end_layer, ") of ",
              args.n_layers);
  // A tied head reads the embedding, so the part holding the head holds the table too.
  if (part_.embedding || (part_.head && args.tie_word_embeddings)) {
    tok_embeddings_ =
        &RegisterParameter("tok_embeddings.weight", {args.vocab_size, args.dim}, options);
  }
  for (int64_t i = part_.first_layer; i < part_.end_layer; ++i) {
    layers_.push_back(RegisterModule(absl::StrCat("layers.", i),
                                     std::make_unique<DecoderBlock>(i, args, options)));
  }
  wrappers_.resize(layers_.size());
  if (part_.head) {
    norm_ = &RegisterParameter("norm.weight", {args.dim}, options);
    if (!args.tie_word_embeddings) {
      output_ = &RegisterParameter("output.weight", {args.vocab_size, args.dim}, options);
    }
    output_fn_ = &RegisterLinear("output", output_ != nullptr ? *output_ : *tok_embeddings_);
  }
}

DecoderBlock* Decoder::Block(int64_t layer_id) const {
  TORCH_CHECK(part_.first_layer <= layer_id && layer_id < part_.end_layer, "layer ", layer_id,
              " is not in this decoder part [", part_.first_layer, ", ", part_.end_layer, ")");
  return layers_[layer_id - part_.first_layer];
}

std::vector<int64_t> Decoder::layer_ids() const {
  std::vector<int64_t> ids;
  for (const DecoderBlock* block : layers_) ids.push_back(block->layer_id());
  return ids;
}

void Decoder::SetLayerWrapper(int64_t layer_id, LayerWrapper wrapper) {
  Block(layer_id);  // checks the id
  wrappers_[layer_id - part_.first_layer] = std::move(wrapper);
}

void Decoder::BuildRopeTables(const at::TensorOptions& options) {
  rope_ = ComputeRopeTables(args_.rope, args_.head_size(), args_.max_seq_len, options);
}

void Decoder::InitWeights() {
  InitEmbedding();
  for (int64_t id : layer_ids()) InitLayer(id);
  InitHead();
}

void Decoder::InitEmbedding() {
  c10::NoGradGuard no_grad;
  // A tied head's copy of the table (a later pipeline stage) takes the first stage's values.
  if (tok_embeddings_ == nullptr || !part_.embedding) return;
  BuildRopeTables(tok_embeddings_->options());
  // Tied, the table is the head too: torchtitan's head init, run last on the shared weight, wins.
  if (args_.tie_word_embeddings) {
    InitAsHead(*tok_embeddings_);
  } else {
    tok_embeddings_->normal_(0.0, kEmbeddingStd);
  }
}

void Decoder::InitAsHead(at::Tensor& weight) const {
  const double std = 1.0 / std::sqrt(static_cast<double>(args_.dim));
  TruncNormal_(weight, 0.0, std, -3 * std, 3 * std);
}

void Decoder::InitLayer(int64_t layer_id) { Block(layer_id)->InitWeights(); }

void Decoder::InitHead() {
  c10::NoGradGuard no_grad;
  if (norm_ == nullptr) return;
  norm_->fill_(1.0);
  if (output_ != nullptr) {
    InitAsHead(*output_);
  }
}

at::Tensor Decoder::Embed(const at::Tensor& tokens) const {
  TORCH_CHECK(part_.embedding, "this decoder part holds no embedding");
  const at::Tensor embedded = hooks_.embed ? hooks_.embed(*tok_embeddings_, tokens)
                                           : at::embedding(*tok_embeddings_, tokens);
  return Apply(&hooks_, &ParallelHooks::region_out, embedded);
}

BatchContext Decoder::PrepareBatch(int64_t batch, int64_t seq_len, const DecoderInputs& inputs) {
  const at::TensorOptions options = NamedParameters().front().tensor->options();
  if (!rope_.cos.defined() && args_.rope.enabled) BuildRopeTables(options);
  BatchContext context;
  context.kv_cache = inputs.kv_cache;
  context.hooks = &hooks_;
  // Explicit positions are needed once anything but plain causal attention from 0 is asked for
  // (or an attention hook builds the mask itself).
  at::Tensor positions = inputs.positions;
  const bool masked = inputs.valid.defined() || inputs.documents.defined() ||
                      inputs.positions.defined() || inputs.kv_cache != nullptr ||
                      static_cast<bool>(hooks_.attention);
  if (masked && !positions.defined()) {
    const int64_t offset = inputs.kv_cache != nullptr ? inputs.kv_cache->length() : 0;
    positions = at::arange(offset, offset + seq_len, options.dtype(at::kLong))
                    .expand({batch, seq_len});
  }
  context.rope = RotationForPositions(rope_, positions, seq_len);
  if (hooks_.attention) {
    TORCH_CHECK(inputs.kv_cache == nullptr,
                "an attention hook (context parallelism) cannot decode");
    context.mask_inputs = {positions, positions, inputs.valid, inputs.documents, inputs.documents};
  } else if (inputs.kv_cache != nullptr) {
    context.mask = BuildAttentionMask(
        inputs.kv_cache->AddTokens(positions, inputs.valid, inputs.documents));
  } else if (masked) {
    MaskInputs mask;
    mask.query_positions = positions;
    mask.key_positions = positions;
    mask.key_valid = inputs.valid;
    mask.query_documents = inputs.documents;
    mask.key_documents = inputs.documents;
    context.mask = BuildAttentionMask(mask);
  }
  return context;
}

at::Tensor Decoder::RunLayers(at::Tensor hidden, const BatchContext& batch) {
  for (size_t i = 0; i < layers_.size(); ++i) {
    const DecoderBlock* block = layers_[i];
    const int64_t slot = static_cast<int64_t>(i);
    // By value: activation checkpointing calls it again in backward, after this frame is gone.
    LayerCall call = [block, batch, slot](const at::Tensor& x) {
      return block->Forward(x, batch, slot);
    };
    hidden = wrappers_[i] ? wrappers_[i](call, hidden) : call(hidden);
  }
  if (batch.kv_cache != nullptr) batch.kv_cache->Commit(hidden.size(1));
  return hidden;
}

at::Tensor Decoder::FinalNorm(const at::Tensor& hidden) const {
  TORCH_CHECK(part_.head, "this decoder part holds no head");
  return RmsNorm(hidden, *norm_, args_.norm_eps);
}

const at::Tensor& Decoder::OutputWeight() const {
  TORCH_CHECK(part_.head, "this decoder part holds no head");
  return output_ != nullptr ? *output_ : *tok_embeddings_;
}

at::Tensor Decoder::HeadInput(const at::Tensor& hidden) const {
  return Apply(&hooks_, &ParallelHooks::region_in, FinalNorm(hidden));
}

at::Tensor Decoder::Head(const at::Tensor& hidden) const {
  return Apply(&hooks_, &ParallelHooks::logits,
               Linear(HeadInput(hidden), OutputWeight(), *output_fn_));
}

at::Tensor Decoder::ForwardHidden(const at::Tensor& tokens, const DecoderInputs& inputs) {
  at::Tensor hidden = Embed(tokens);
  const BatchContext batch = PrepareBatch(tokens.size(0), tokens.size(1), inputs);
  return RunLayers(hidden, batch);
}

at::Tensor Decoder::Forward(const at::Tensor& tokens, const DecoderInputs& inputs) {
  return Head(ForwardHidden(tokens, inputs));
}

}  // namespace titan
