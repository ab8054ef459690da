#ifndef TITAN_MODELS_LLAMA3_MODEL_H_
#define TITAN_MODELS_LLAMA3_MODEL_H_

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <vector>

#include "lib/model/module.h"
#include "lib/model/transformer_ops.h"
#include "models/llama3/model_args.h"

namespace titan {

class Llama3Attention : public Module {
 public:
  Llama3Attention(const Llama3Args& args, const at::TensorOptions& options);
  at::Tensor Forward(const at::Tensor& x, const RopeTables& rope) const;
  void InitWeights(double out_std);

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
  at::Tensor& wq_;
  at::Tensor& wk_;
  at::Tensor& wv_;
  at::Tensor& wo_;
};

class Llama3FeedForward : public Module {
 public:
  Llama3FeedForward(const Llama3Args& args, const at::TensorOptions& options);
  at::Tensor Forward(const at::Tensor& x) const;
  void InitWeights(double out_std);

 private:
  at::Tensor& w1_;
  at::Tensor& w2_;
  at::Tensor& w3_;
};

class Llama3Block : public Module {
 public:
  Llama3Block(int64_t layer_id, const Llama3Args& args, const at::TensorOptions& options);
  at::Tensor Forward(const at::Tensor& x, const RopeTables& rope) const;
  void InitWeights();

 private:
  int64_t layer_id_;
  const Llama3Args args_;
  at::Tensor& attention_norm_;
  at::Tensor& ffn_norm_;
  Llama3Attention* attention_;
  Llama3FeedForward* feed_forward_;
};

// Llama 3 decoder (parameter names as torchtitan's). Knows nothing of parallelism: parallelize code
// wraps the per-layer calls through SetLayerWrapper (activation checkpointing, FSDP hooks).
class Llama3Model : public Module {
 public:
  using LayerCall = std::function<at::Tensor(const at::Tensor&)>;
  using LayerWrapper = std::function<at::Tensor(const LayerCall&, const at::Tensor&)>;

  // `options` may name the meta device: nothing is allocated until Materialize().
  Llama3Model(const Llama3Args& args, const at::TensorOptions& options);

  // tokens [B, S] int64 -> logits [B, S, vocab].
  at::Tensor Forward(const at::Tensor& tokens);

  // torchtitan's initialisation, on materialised parameters; also builds the RoPE tables. It is
  // InitEmbedding, InitLayer(0 .. n_layers - 1), InitHead in turn: FSDP runs them group by group,
  // sharding in between, and draws the same random numbers as one process.
  void InitWeights();
  void InitEmbedding();
  void InitLayer(int64_t layer);
  void InitHead();
  // RoPE tables on `options`' device (InitWeights calls this; loading a checkpoint needs it too).
  void BuildRopeTables(const at::TensorOptions& options);

  void SetLayerWrapper(int64_t layer, LayerWrapper wrapper);
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  const Llama3Args& args() const { return args_; }

 private:
  const Llama3Args args_;
  at::Tensor& tok_embeddings_;
  std::vector<Llama3Block*> layers_;
  std::vector<LayerWrapper> wrappers_;
  at::Tensor& norm_;
  at::Tensor* output_;  // null when tied to the embedding
  RopeTables rope_;
};

}  // namespace titan

#endif  // TITAN_MODELS_LLAMA3_MODEL_H_
