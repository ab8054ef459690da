#ifndef TITAN_MODELS_LLAMA3_MODEL_ARGS_H_
#define TITAN_MODELS_LLAMA3_MODEL_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/transformer_ops.h"

namespace titan {

// The shape of one Llama 3 model. Flavors are rows of a table, not code paths.
struct Llama3Args {
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 0;  // 0: same as n_heads (multi-head attention)
  int64_t vocab_size = 128256;
  int64_t multiple_of = 256;
  double ffn_dim_multiplier = 0;  // 0: none
  double norm_eps = 1e-5;
  double rope_theta = 500000;
  RopeScaling rope_scaling;
  int64_t max_seq_len = 131072;
  bool tie_word_embeddings = false;
  // torchtitan's init: output projections' std shrinks with depth (layer index) when true.
  bool depth_init = true;

  int64_t head_dim() const { return dim / n_heads; }
  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t ffn_hidden_dim() const { return FeedForwardHiddenDim(dim, multiple_of, ffn_dim_multiplier); }
};

// debugmodel, 1B, 3B (Llama 3.2), 8B, 70B, 405B (Llama 3.1). NotFound lists the known names.
absl::StatusOr<Llama3Args> Llama3Flavor(const std::string& flavor);
std::vector<std::string> Llama3FlavorNames();

}  // namespace titan

#endif  // TITAN_MODELS_LLAMA3_MODEL_ARGS_H_
