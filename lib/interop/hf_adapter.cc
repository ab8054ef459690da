#include "lib/interop/hf_adapter.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace titan {
namespace {

// Per-layer names: titan suffix after "layers.N." <-> HF suffix after "model.layers.N.".
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"attention.q_norm.weight", "self_attn.q_norm.weight"},
    {"attention.k_norm.weight", "self_attn.k_norm.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"attention_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
};
constexpr std::pair<const char*, const char*> kTopNames[] = {
    {"tok_embeddings.weight", "model.embed_tokens.weight"},
    {"norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

// "<prefix><digits>.<rest>": the layer index and the rest.
bool SplitLayerName(const std::string& name, absl::string_view prefix, int64_t& layer,
                    std::string& rest) {
  if (!absl::StartsWith(name, prefix)) return false;
  const absl::string_view tail = absl::string_view(name).substr(prefix.size());
  const size_t dot = tail.find('.');
  if (dot == absl::string_view::npos || dot == 0) return false;
  if (!absl::SimpleAtoi(tail.substr(0, dot), &layer) || layer < 0) return false;
  rest = std::string(tail.substr(dot + 1));
  return true;
}

// How many heads a q/k tensor's rows hold (a qk-norm weight is one head's worth), or 0 for a
// tensor RoPE never sees.
int64_t RopeHeads(const std::string& titan_name, const TransformerArgs& args) {
  if (absl::EndsWith(titan_name, ".attention.wq.weight")) return args.n_heads;
  if (absl::EndsWith(titan_name, ".attention.wk.weight")) return args.kv_heads();
  if (absl::EndsWith(titan_name, ".attention.q_norm.weight") ||
      absl::EndsWith(titan_name, ".attention.k_norm.weight")) {
    return 1;
  }
  return 0;
}

at::Tensor Permute(const std::string& titan_name, const at::Tensor& tensor,
                   const TransformerArgs& args, bool to_hf) {
  const int64_t heads = RopeHeads(titan_name, args);
  if (heads == 0 || args.rope.layout != RopeLayout::kInterleaved) return tensor;
  // A norm weight [head_dim] permutes as a one-column matrix.
  const at::Tensor matrix = tensor.dim() == 1 ? tensor.unsqueeze(1) : tensor;
  const at::Tensor permuted =
      to_hf ? InterleavedToRotateHalf(matrix, heads) : RotateHalfToInterleaved(matrix, heads);
  return tensor.dim() == 1 ? permuted.squeeze(1) : permuted;
}

}  // namespace

absl::StatusOr<std::string> TitanToHfName(const std::string& titan_name) {
  for (const auto& [titan, hf] : kTopNames) {
    if (titan_name == titan) return std::string(hf);
  }
  int64_t layer;
  std::string rest;
  if (SplitLayerName(titan_name, "layers.", layer, rest)) {
    for (const auto& [titan, hf] : kLayerNames) {
      if (rest == titan) return absl::StrCat("model.layers.", layer, ".", hf);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", titan_name, "' is not a titan decoder parameter"));
}

absl::StatusOr<std::string> HfToTitanName(const std::string& hf_name) {
  for (const auto& [titan, hf] : kTopNames) {
    if (hf_name == hf) return std::string(titan);
  }
  int64_t layer;
  std::string rest;
  if (SplitLayerName(hf_name, "model.layers.", layer, rest)) {
    for (const auto& [titan, hf] : kLayerNames) {
      if (rest == hf) return absl::StrCat("layers.", layer, ".", titan);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tensor '", hf_name, "' is not a Hugging Face decoder parameter"));
}

at::Tensor InterleavedToRotateHalf(const at::Tensor& weight, int64_t heads) {
  const int64_t rows = weight.size(0), cols = weight.size(1);
  return weight.view({heads, rows / heads / 2, 2, cols}).transpose(1, 2).reshape({rows, cols});
}

at::Tensor RotateHalfToInterleaved(const at::Tensor& weight, int64_t heads) {
  const int64_t rows = weight.size(0), cols = weight.size(1);
  return weight.view({heads, 2, rows / heads / 2, cols}).transpose(1, 2).reshape({rows, cols});
}

at::Tensor TitanTensorToHf(const std::string& titan_name, const at::Tensor& tensor,
                           const TransformerArgs& args) {
  return Permute(titan_name, tensor, args, /*to_hf=*/true);
}

at::Tensor HfTensorToTitan(const std::string& titan_name, const at::Tensor& tensor,
                           const TransformerArgs& args) {
  return Permute(titan_name, tensor, args, /*to_hf=*/false);
}

}  // namespace titan
