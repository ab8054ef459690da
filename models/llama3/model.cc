#include "models/llama3/model.h"

#include <c10/core/GradMode.h>

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/model/init.h"

namespace titan {
namespace {

// torchtitan's default std for input projections; truncation is at ±2 (absolute), as there.
constexpr double kInitStd = 0.02;

void InitLinear(at::Tensor& weight, double std) { TruncNormal_(weight, 0.0, std, -2.0, 2.0); }

}  // namespace

Llama3Attention::Llama3Attention(const Llama3Args& args, const at::TensorOptions& options)
    : n_heads_(args.n_heads),
      n_kv_heads_(args.kv_heads()),
      head_dim_(args.head_dim()),
      wq_(RegisterParameter("wq.weight", {args.n_heads * args.head_dim(), args.dim}, options)),
      wk_(RegisterParameter("wk.weight", {args.kv_heads() * args.head_dim(), args.dim}, options)),
      wv_(RegisterParameter("wv.weight", {args.kv_heads() * args.head_dim(), args.dim}, options)),
      wo_(RegisterParameter("wo.weight", {args.dim, args.n_heads * args.head_dim()}, options)) {}

at::Tensor Llama3Attention::Forward(const at::Tensor& x, const RopeTables& rope) const {
  const int64_t batch = x.size(0);
  const int64_t seq_len = x.size(1);
  at::Tensor q = at::linear(x, wq_).view({batch, seq_len, n_heads_, head_dim_});
  at::Tensor k = at::linear(x, wk_).view({batch, seq_len, n_kv_heads_, head_dim_});
  at::Tensor v = at::linear(x, wv_).view({batch, seq_len, n_kv_heads_, head_dim_});
  q = ApplyRotaryEmbedding(q, rope).transpose(1, 2);
  k = ApplyRotaryEmbedding(k, rope).transpose(1, 2);
  v = v.transpose(1, 2);
  at::Tensor out = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                    /*is_causal=*/true, /*scale=*/std::nullopt,
                                                    /*enable_gqa=*/n_kv_heads_ != n_heads_);
  return at::linear(out.transpose(1, 2).reshape({batch, seq_len, -1}), wo_);
}

void Llama3Attention::InitWeights(double out_std) {
  for (at::Tensor* w : {&wq_, &wk_, &wv_}) InitLinear(*w, kInitStd);
  InitLinear(wo_, out_std);
}

Llama3FeedForward::Llama3FeedForward(const Llama3Args& args, const at::TensorOptions& options)
    : w1_(RegisterParameter("w1.weight", {args.ffn_hidden_dim(), args.dim}, options)),
      w2_(RegisterParameter("w2.weight", {args.dim, args.ffn_hidden_dim()}, options)),
      w3_(RegisterParameter("w3.weight", {args.ffn_hidden_dim(), args.dim}, options)) {}

at::Tensor Llama3FeedForward::Forward(const at::Tensor& x) const { return SwiGlu(x, w1_, w2_, w3_); }

void Llama3FeedForward::InitWeights(double out_std) {
  InitLinear(w1_, kInitStd);
  InitLinear(w2_, out_std);
  InitLinear(w3_, out_std);
}

Llama3Block::Llama3Block(int64_t layer_id, const Llama3Args& args, const at::TensorOptions& options)
    : layer_id_(layer_id),
      args_(args),
      attention_norm_(RegisterParameter("attention_norm.weight", {args.dim}, options)),
      ffn_norm_(RegisterParameter("ffn_norm.weight", {args.dim}, options)),
      attention_(RegisterModule("attention", std::make_unique<Llama3Attention>(args, options))),
      feed_forward_(
          RegisterModule("feed_forward", std::make_unique<Llama3FeedForward>(args, options))) {}

at::Tensor Llama3Block::Forward(const at::Tensor& x, const RopeTables& rope) const {
  at::Tensor h = x + attention_->Forward(RmsNorm(x, attention_norm_, args_.norm_eps), rope);
  return h + feed_forward_->Forward(RmsNorm(h, ffn_norm_, args_.norm_eps));
}

void Llama3Block::InitWeights() {
  const double depth = args_.depth_init ? static_cast<double>(layer_id_ + 1)
                                        : static_cast<double>(args_.n_layers);
  const double out_std = kInitStd / std::sqrt(2.0 * depth);
  c10::NoGradGuard no_grad;
  attention_norm_.fill_(1.0);
  ffn_norm_.fill_(1.0);
  attention_->InitWeights(out_std);
  feed_forward_->InitWeights(out_std);
}

Llama3Model::Llama3Model(const Llama3Args& args, const at::TensorOptions& options)
    : args_(args),
      tok_embeddings_(RegisterParameter("tok_embeddings.weight", {args.vocab_size, args.dim}, options)),
      norm_(RegisterParameter("norm.weight", {args.dim}, options)),
      output_(args.tie_word_embeddings
                  ? nullptr
                  : &RegisterParameter("output.weight", {args.vocab_size, args.dim}, options)) {
  for (int64_t i = 0; i < args.n_layers; ++i) {
    layers_.push_back(RegisterModule(absl::StrCat("layers.", i),
                                     std::make_unique<Llama3Block>(i, args, options)));
  }
  wrappers_.resize(layers_.size());
}

void Llama3Model::SetLayerWrapper(int64_t layer, LayerWrapper wrapper) {
  wrappers_.at(layer) = std::move(wrapper);
}

void Llama3Model::BuildRopeTables(const at::TensorOptions& options) {
  rope_ = ComputeRopeTables(args_.head_dim(), args_.max_seq_len, args_.rope_theta,
                            args_.rope_scaling, options);
}

void Llama3Model::InitWeights() {
  InitEmbedding();
  for (int64_t layer = 0; layer < num_layers(); ++layer) InitLayer(layer);
  InitHead();
}

void Llama3Model::InitEmbedding() {
  c10::NoGradGuard no_grad;
  BuildRopeTables(tok_embeddings_.options());
  tok_embeddings_.normal_(0.0, 1.0);
}

void Llama3Model::InitLayer(int64_t layer) { layers_.at(layer)->InitWeights(); }

void Llama3Model::InitHead() {
  c10::NoGradGuard no_grad;
  norm_.fill_(1.0);
  if (output_ != nullptr) {
    const double std = 1.0 / std::sqrt(static_cast<double>(args_.dim));
    TruncNormal_(*output_, 0.0, std, -3 * std, 3 * std);
  }
}

at::Tensor Llama3Model::Forward(const at::Tensor& tokens) {
  if (!rope_.cos.defined()) BuildRopeTables(tok_embeddings_.options());
  at::Tensor h = at::embedding(tok_embeddings_, tokens);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Llama3Block* layer = layers_[i];
    LayerCall call = [layer, this](const at::Tensor& x) { return layer->Forward(x, rope_); };
    h = wrappers_[i] ? wrappers_[i](call, h) : call(h);
  }
  h = RmsNorm(h, norm_, args_.norm_eps);
  return at::linear(h, output_ != nullptr ? *output_ : tok_embeddings_);
}

}  // namespace titan
