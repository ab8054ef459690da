#include "lib/interop/llama3_hf.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/util/status_macros.h"
#include "models/llama3/model.h"

namespace titan {
namespace {

using nlohmann::json;

// Per-layer names: titan suffix after "layers.N." <-> HF suffix after "model.layers.N.".
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
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

bool SameArchitecture(const Llama3Args& a, const Llama3Args& b) {
  return a.dim == b.dim && a.n_layers == b.n_layers && a.n_heads == b.n_heads &&
         a.kv_heads() == b.kv_heads() && a.ffn_hidden_dim() == b.ffn_hidden_dim() &&
         a.norm_eps == b.norm_eps && a.rope_theta == b.rope_theta &&
         a.rope_scaling.factor == b.rope_scaling.factor &&
         (a.rope_scaling.factor <= 0 ||
          (a.rope_scaling.low_freq_factor == b.rope_scaling.low_freq_factor &&
           a.rope_scaling.high_freq_factor == b.rope_scaling.high_freq_factor &&
           a.rope_scaling.original_max_position_embeddings ==
               b.rope_scaling.original_max_position_embeddings)) &&
         a.tie_word_embeddings == b.tie_word_embeddings;
}

// Reads `key` of `object` into `out` when present; a wrong type is an error naming the key.
template <typename T>
absl::Status ReadOptional(const json& object, const char* key, const std::string& source, T& out) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  try {
    out = it->get<T>();
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", key, ": unexpected ", it->type_name(), " (", e.what(), ")"));
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status ReadRequired(const json& object, const char* key, const std::string& source, T& out) {
  if (!object.contains(key) || object.at(key).is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": missing key \"", key, "\""));
  }
  return ReadOptional(object, key, source, out);
}

// Chooses multiple_of / ffn_dim_multiplier so that FeedForwardHiddenDim yields `hidden` exactly.
absl::Status SetFeedForwardHiddenDim(int64_t hidden, const std::string& source, Llama3Args& args) {
  const int64_t base = FeedForwardHiddenDim(args.dim, 1, 0);
  if (hidden >= base) {
    args.multiple_of = hidden;  // Rounds base up to exactly `hidden`.
    args.ffn_dim_multiplier = 0;
  } else {
    args.multiple_of = 1;
    args.ffn_dim_multiplier = (static_cast<double>(hidden) + 0.5) / static_cast<double>(base);
  }
  if (hidden <= 0 || args.ffn_hidden_dim() != hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": intermediate_size ", hidden, " is not representable"));
  }
  return absl::OkStatus();
}

// A named flavor's args when `args` matches one (keeping vocab_size and max_seq_len), else `args`.
Llama3ModelInfo WithFlavor(Llama3Args args, json bos, json eos) {
  Llama3ModelInfo info;
  info.flavor = MatchLlama3Flavor(args);
  if (!info.flavor.empty()) {
    Llama3Args flavor = *Llama3Flavor(info.flavor);
    flavor.vocab_size = args.vocab_size;
    flavor.max_seq_len = args.max_seq_len;
    args = flavor;
  }
  info.args = args;
  info.bos_token_id = std::move(bos);
  info.eos_token_id = std::move(eos);
  return info;
}

}  // namespace

std::string MatchLlama3Flavor(const Llama3Args& args) {
  for (const std::string& name : Llama3FlavorNames()) {
    if (SameArchitecture(*Llama3Flavor(name), args)) return name;
  }
  return "";
}

json Llama3ArgsToJson(const Llama3Args& args) {
  json out = {{"dim", args.dim},
              {"n_layers", args.n_layers},
              {"n_heads", args.n_heads},
              {"n_kv_heads", args.kv_heads()},
              {"vocab_size", args.vocab_size},
              {"multiple_of", args.multiple_of},
              {"ffn_dim_multiplier", args.ffn_dim_multiplier},
              {"norm_eps", args.norm_eps},
              {"rope_theta", args.rope_theta},
              {"max_seq_len", args.max_seq_len},
              {"tie_word_embeddings", args.tie_word_embeddings}};
  if (args.rope_scaling.factor > 0) {
    out["rope_scaling"] = {
        {"factor", args.rope_scaling.factor},
        {"low_freq_factor", args.rope_scaling.low_freq_factor},
        {"high_freq_factor", args.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", args.rope_scaling.original_max_position_embeddings}};
  }
  return out;
}

absl::StatusOr<Llama3Args> Llama3ArgsFromJson(const json& object, const std::string& source) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a JSON object of model args, got ", object.type_name()));
  }
  Llama3Args args;
  TITAN_RETURN_IF_ERROR(ReadRequired(object, "dim", source, args.dim));
  TITAN_RETURN_IF_ERROR(ReadRequired(object, "n_layers", source, args.n_layers));
  TITAN_RETURN_IF_ERROR(ReadRequired(object, "n_heads", source, args.n_heads));
  TITAN_RETURN_IF_ERROR(ReadRequired(object, "vocab_size", source, args.vocab_size));
  TITAN_RETURN_IF_ERROR(ReadOptional(object, "n_kv_heads", source, args.n_kv_heads));
  TITAN_RETURN_IF_ERROR(ReadOptional(object, "multiple_of", source, args.multiple_of));
  TITAN_RETURN_IF_ERROR(
      ReadOptional(object, "ffn_dim_multiplier", source, args.ffn_dim_multiplier));
  TITAN_RETURN_IF_ERROR(ReadOptional(object, "norm_eps", source, args.norm_eps));
  TITAN_RETURN_IF_ERROR(ReadOptional(object, "rope_theta", source, args.rope_theta));
  TITAN_RETURN_IF_ERROR(ReadOptional(object, "max_seq_len", source, args.max_seq_len));
  TITAN_RETURN_IF_ERROR(
      ReadOptional(object, "tie_word_embeddings", source, args.tie_word_embeddings));
  const auto scaling = object.find("rope_scaling");
  if (scaling != object.end() && !scaling->is_null()) {
    const std::string where = source + ": rope_scaling";
    if (!scaling->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object"));
    }
    RopeScaling& s = args.rope_scaling;
    TITAN_RETURN_IF_ERROR(ReadRequired(*scaling, "factor", where, s.factor));
    TITAN_RETURN_IF_ERROR(ReadOptional(*scaling, "low_freq_factor", where, s.low_freq_factor));
    TITAN_RETURN_IF_ERROR(
        ReadOptional(*scaling, "high_freq_factor", where, s.high_freq_factor));
    TITAN_RETURN_IF_ERROR(ReadOptional(*scaling, "original_max_position_embeddings", where,
                                               s.original_max_position_embeddings));
  }
  if (args.dim <= 0 || args.n_layers <= 0 || args.n_heads <= 0 || args.vocab_size <= 0 ||
      args.dim % args.n_heads != 0 || args.n_heads % args.kv_heads() != 0 ||
      args.head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": inconsistent model args (dim ", args.dim, ", n_layers ", args.n_layers,
        ", n_heads ", args.n_heads, ", n_kv_heads ", args.kv_heads(), ", vocab_size ",
        args.vocab_size, "): expected positive sizes, dim divisible by n_heads into an even "
        "head_dim, n_heads divisible by n_kv_heads"));
  }
  return args;
}

json Llama3ModelInfoToJson(const Llama3ModelInfo& info) {
  return {{"name", "llama3"},
          {"flavor", info.flavor},
          {"args", Llama3ArgsToJson(info.args)},
          {"bos_token_id", info.bos_token_id},
          {"eos_token_id", info.eos_token_id}};
}

absl::StatusOr<Llama3ModelInfo> Llama3ModelInfoFromJson(const json& object,
                                                        const std::string& source) {
  if (!object.is_object() || !object.contains("args")) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected an object with \"args\", got ", object.type_name()));
  }
  std::string name = "llama3";
  TITAN_RETURN_IF_ERROR(ReadOptional(object, "name", source, name));
  if (name != "llama3") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model \"", name, "\", expected \"llama3\""));
  }
  absl::StatusOr<Llama3Args> args = Llama3ArgsFromJson(object.at("args"), source + ": args");
  if (!args.ok()) return args.status();
  return WithFlavor(*args, object.value("bos_token_id", json()),
                    object.value("eos_token_id", json()));
}

std::vector<std::pair<std::string, std::vector<int64_t>>> Llama3ParameterShapes(
    const Llama3Args& args) {
  // The model itself on the meta device names its parameters: no allocation, no second list.
  Llama3Model model(args, at::TensorOptions().device(at::kMeta));
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const ParamRef& param : model.NamedParameters()) {
    shapes.emplace_back(param.name, param.tensor->sizes().vec());
  }
  return shapes;
}

json Llama3HfConfig(const Llama3ModelInfo& info, const std::string& torch_dtype) {
  const Llama3Args& args = info.args;
  json rope_scaling = nullptr;
  if (args.rope_scaling.factor > 0) {
    rope_scaling = {
        {"rope_type", "llama3"},
        {"factor", args.rope_scaling.factor},
        {"low_freq_factor", args.rope_scaling.low_freq_factor},
        {"high_freq_factor", args.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", args.rope_scaling.original_max_position_embeddings}};
  }
  return {{"architectures", {"LlamaForCausalLM"}},
          {"model_type", "llama"},
          {"attention_bias", false},
          {"attention_dropout", 0.0},
          {"mlp_bias", false},
          {"hidden_act", "silu"},
          {"hidden_size", args.dim},
          {"intermediate_size", args.ffn_hidden_dim()},
          {"num_attention_heads", args.n_heads},
          {"num_key_value_heads", args.kv_heads()},
          {"num_hidden_layers", args.n_layers},
          {"head_dim", args.head_dim()},
          {"vocab_size", args.vocab_size},
          {"max_position_embeddings", args.max_seq_len},
          {"rms_norm_eps", args.norm_eps},
          {"rope_theta", args.rope_theta},
          {"rope_scaling", rope_scaling},
          {"tie_word_embeddings", args.tie_word_embeddings},
          {"initializer_range", 0.02},
          {"pretraining_tp", 1},
          {"use_cache", true},
          {"bos_token_id", info.bos_token_id},
          {"eos_token_id", info.eos_token_id},
          {"torch_dtype", torch_dtype}};
}

json Llama3HfGenerationConfig(const Llama3ModelInfo& info) {
  return {{"_from_model_config", true},
          {"bos_token_id", info.bos_token_id},
          {"eos_token_id", info.eos_token_id}};
}

absl::StatusOr<Llama3ModelInfo> Llama3ModelInfoFromHfConfig(const json& config,
                                                            const std::string& source) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": expected a JSON object"));
  }
  std::string model_type = "llama", hidden_act = "silu";
  bool attention_bias = false, mlp_bias = false;
  TITAN_RETURN_IF_ERROR(ReadOptional(config, "model_type", source, model_type));
  TITAN_RETURN_IF_ERROR(ReadOptional(config, "hidden_act", source, hidden_act));
  TITAN_RETURN_IF_ERROR(ReadOptional(config, "attention_bias", source, attention_bias));
  TITAN_RETURN_IF_ERROR(ReadOptional(config, "mlp_bias", source, mlp_bias));
  if (model_type != "llama") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": model_type \"", model_type, "\", expected \"llama\""));
  }
  if (hidden_act != "silu" || attention_bias || mlp_bias) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": hidden_act \"", hidden_act, "\", attention_bias ", attention_bias,
        ", mlp_bias ", mlp_bias, "; titan's Llama 3 needs silu and no biases"));
  }
  Llama3Args args;
  int64_t intermediate_size = 0;
  args.norm_eps = 1e-6;  // transformers' LlamaConfig defaults.
  args.rope_theta = 10000;
  args.max_seq_len = 2048;
  args.n_kv_heads = 0;
  TITAN_RETURN_IF_ERROR(ReadRequired(config, "hidden_size", source, args.dim));
  TITAN_RETURN_IF_ERROR(ReadRequired(config, "num_hidden_layers", source, args.n_layers));
  TITAN_RETURN_IF_ERROR(ReadRequired(config, "num_attention_heads", source, args.n_heads));
  TITAN_RETURN_IF_ERROR(ReadRequired(config, "vocab_size", source, args.vocab_size));
  TITAN_RETURN_IF_ERROR(
      ReadRequired(config, "intermediate_size", source, intermediate_size));
  TITAN_RETURN_IF_ERROR(ReadOptional(config, "num_key_value_heads", source, args.n_kv_heads));
  TITAN_RETURN_IF_ERROR(ReadOptional(config, "rms_norm_eps", source, args.norm_eps));
  TITAN_RETURN_IF_ERROR(
      ReadOptional(config, "max_position_embeddings", source, args.max_seq_len));
  TITAN_RETURN_IF_ERROR(
      ReadOptional(config, "tie_word_embeddings", source, args.tie_word_embeddings));
  TITAN_RETURN_IF_ERROR(ReadOptional(config, "rope_theta", source, args.rope_theta));
  if (args.dim <= 0 || args.n_heads <= 0 || args.dim % args.n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": hidden_size ", args.dim,
                                                   " is not a multiple of num_attention_heads ",
                                                   args.n_heads));
  }
  int64_t head_dim = args.head_dim();
  TITAN_RETURN_IF_ERROR(ReadOptional(config, "head_dim", source, head_dim));
  if (head_dim != args.head_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": head_dim ", head_dim, ", expected ",
                                                   args.head_dim(), " (hidden_size / heads)"));
  }
  // transformers 5 writes rope_parameters (with rope_theta inside); earlier ones rope_scaling.
  json rope = config.value("rope_scaling", json());
  if (rope.is_null()) rope = config.value("rope_parameters", json());
  if (!rope.is_null()) {
    const std::string where = source + (config.contains("rope_scaling") &&
                                                !config.at("rope_scaling").is_null()
                                            ? ": rope_scaling"
                                            : ": rope_parameters");
    if (!rope.is_object()) return absl::InvalidArgumentError(where + ": expected an object");
    std::string type = "default";
    TITAN_RETURN_IF_ERROR(ReadOptional(rope, "type", where, type));
    TITAN_RETURN_IF_ERROR(ReadOptional(rope, "rope_type", where, type));
    TITAN_RETURN_IF_ERROR(ReadOptional(rope, "rope_theta", where, args.rope_theta));
    if (type == "llama3") {
      RopeScaling& s = args.rope_scaling;
      TITAN_RETURN_IF_ERROR(ReadRequired(rope, "factor", where, s.factor));
      TITAN_RETURN_IF_ERROR(ReadRequired(rope, "low_freq_factor", where, s.low_freq_factor));
      TITAN_RETURN_IF_ERROR(
          ReadRequired(rope, "high_freq_factor", where, s.high_freq_factor));
      TITAN_RETURN_IF_ERROR(ReadRequired(rope, "original_max_position_embeddings", where,
                                                 s.original_max_position_embeddings));
    } else if (type != "default") {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": rope_type \"", type, "\", expected \"llama3\" or \"default\""));
    }
  }
  TITAN_RETURN_IF_ERROR(SetFeedForwardHiddenDim(intermediate_size, source, args));
  absl::StatusOr<Llama3Args> checked = Llama3ArgsFromJson(Llama3ArgsToJson(args), source);
  if (!checked.ok()) return checked.status();
  return WithFlavor(args, config.value("bos_token_id", json()), config.value("eos_token_id", json()));
}

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
      absl::StrCat("tensor '", titan_name, "' is not a titan Llama 3 parameter"));
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
      absl::StrCat("tensor '", hf_name, "' is not a LlamaForCausalLM parameter"));
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
                           const Llama3Args& args) {
  if (absl::EndsWith(titan_name, ".attention.wq.weight")) {
    return InterleavedToRotateHalf(tensor, args.n_heads);
  }
  if (absl::EndsWith(titan_name, ".attention.wk.weight")) {
    return InterleavedToRotateHalf(tensor, args.kv_heads());
  }
  return tensor;
}

at::Tensor HfTensorToTitan(const std::string& titan_name, const at::Tensor& tensor,
                           const Llama3Args& args) {
  if (absl::EndsWith(titan_name, ".attention.wq.weight")) {
    return RotateHalfToInterleaved(tensor, args.n_heads);
  }
  if (absl::EndsWith(titan_name, ".attention.wk.weight")) {
    return RotateHalfToInterleaved(tensor, args.kv_heads());
  }
  return tensor;
}

}  // namespace titan
