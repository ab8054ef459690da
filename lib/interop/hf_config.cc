#include "lib/interop/hf_config.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/model/transformer_args.h"
#include "lib/util/json_fields.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

// transformers' YaRN defaults: parameters equal to these are left out of config.json, as
// transformers leaves them out.
constexpr double kYarnBetaFast = 32;
constexpr double kYarnBetaSlow = 1;

json RopeScalingToJson(const RopeConfig& rope) {
  switch (rope.scaling) {
    case RopeScalingType::kNone:
      return nullptr;
    case RopeScalingType::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", rope.factor},
              {"low_freq_factor", rope.low_freq_factor},
              {"high_freq_factor", rope.high_freq_factor},
              {"original_max_position_embeddings", rope.original_max_position_embeddings}};
    case RopeScalingType::kYarn: {
      json out = {{"rope_type", "yarn"},
                  {"factor", rope.factor},
                  {"original_max_position_embeddings", rope.original_max_position_embeddings}};
      if (rope.beta_fast != kYarnBetaFast) out["beta_fast"] = rope.beta_fast;
      if (rope.beta_slow != kYarnBetaSlow) out["beta_slow"] = rope.beta_slow;
      if (rope.mscale != 0) out["mscale"] = rope.mscale;
      if (rope.mscale_all_dim != 0) out["mscale_all_dim"] = rope.mscale_all_dim;
      if (rope.attention_factor > 0) out["attention_factor"] = rope.attention_factor;
      if (!rope.truncate) out["truncate"] = false;
      return out;
    }
  }
  return nullptr;
}

// The registered family whose Hugging Face model_type is `model_type`.
absl::StatusOr<const ModelSpec*> FindHfFamily(const std::string& model_type,
                                              const std::string& source) {
  std::vector<std::string> known;
  for (const std::string& name : RegisteredModelNames()) {
    const ModelSpec* spec = *FindModel(name);
    if (spec->hf.model_type == model_type) return spec;
    known.push_back(absl::StrCat("\"", spec->hf.model_type, "\" (", name, ")"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": model_type \"", model_type,
                   "\" is not supported; known: ", absl::StrJoin(known, ", ")));
}

// partial_rotary_factor sits beside rope_theta: at the top level, or in transformers 5's
// rope_parameters.
absl::Status CheckWholeHeadsRotate(const json& object, const std::string& where) {
  double partial_rotary = 1;
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "partial_rotary_factor", where, partial_rotary));
  if (partial_rotary != 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": partial_rotary_factor ",
                                                   partial_rotary,
                                                   ": titan's decoder rotates whole heads"));
  }
  return absl::OkStatus();
}

// Refuses what the shared decoder cannot compute: one line per config, naming the key.
absl::Status CheckRepresentable(const json& config, int64_t n_layers, const std::string& source) {
  std::string hidden_act = "silu";
  TITAN_RETURN_IF_ERROR(ReadOptionalField(config, "hidden_act", source, hidden_act));
  if (hidden_act != "silu") {
    return absl::InvalidArgumentError(absl::StrCat(source, ": hidden_act \"", hidden_act,
                                                   "\": titan's decoder supports only \"silu\""));
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool bias = false;
    TITAN_RETURN_IF_ERROR(ReadOptionalField(config, key, source, bias));
    if (bias) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", key, " true: titan's decoder has no biases"));
    }
  }
  double attention_dropout = 0;
  TITAN_RETURN_IF_ERROR(ReadOptionalField(config, "attention_dropout", source, attention_dropout));
  if (attention_dropout != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": attention_dropout ", attention_dropout,
                     ": titan's decoder has no dropout (expected 0)"));
  }
  TITAN_RETURN_IF_ERROR(CheckWholeHeadsRotate(config, source));
  std::vector<std::string> layer_types;
  TITAN_RETURN_IF_ERROR(ReadOptionalField(config, "layer_types", source, layer_types));
  for (const std::string& type : layer_types) {
    if (type != "full_attention") {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": layer_types: \"", type, "\": titan's decoder has only full attention"));
    }
  }
  // Without layer_types, Qwen-style configs slide from layer max_window_layers on.
  bool use_sliding_window = false;
  int64_t max_window_layers = n_layers;
  TITAN_RETURN_IF_ERROR(
      ReadOptionalField(config, "use_sliding_window", source, use_sliding_window));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(config, "max_window_layers", source, max_window_layers));
  const bool has_window =
      config.contains("sliding_window") && !config.at("sliding_window").is_null();
  if (layer_types.empty() && use_sliding_window && has_window && max_window_layers < n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": use_sliding_window true: titan's decoder has only full attention"));
  }
  return absl::OkStatus();
}

// RoPE from rope_scaling (older transformers) or rope_parameters (transformers 5, with rope_theta
// inside), completed as transformers completes them.
absl::Status ReadRope(const json& config, int64_t max_positions, const std::string& source,
                      RopeConfig& rope) {
  TITAN_RETURN_IF_ERROR(ReadOptionalField(config, "rope_theta", source, rope.theta));
  rope.scaling = RopeScalingType::kNone;
  const char* key = nullptr;
  for (const char* candidate : {"rope_scaling", "rope_parameters"}) {
    if (key == nullptr && config.contains(candidate) && !config.at(candidate).is_null()) {
      key = candidate;
    }
  }
  if (key == nullptr) return absl::OkStatus();
  const std::string where = absl::StrCat(source, ": ", key);
  const json& params = config.at(key);
  if (!params.is_object()) return absl::InvalidArgumentError(where + ": expected an object");
  std::string type = "default";
  TITAN_RETURN_IF_ERROR(ReadOptionalField(params, "type", where, type));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(params, "rope_type", where, type));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(params, "rope_theta", where, rope.theta));
  TITAN_RETURN_IF_ERROR(CheckWholeHeadsRotate(params, where));
  if (type == "default") return absl::OkStatus();
  if (type != "llama3" && type != "yarn") {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": rope_type \"", type, "\": titan supports \"default\", \"llama3\" and \"yarn\""));
  }
  rope.original_max_position_embeddings = max_positions;
  TITAN_RETURN_IF_ERROR(ReadOptionalField(params, "original_max_position_embeddings", where,
                                          rope.original_max_position_embeddings));
  if (rope.original_max_position_embeddings <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": original_max_position_embeddings must be positive"));
  }
  if (type == "llama3") {
    rope.scaling = RopeScalingType::kLlama3;
    TITAN_RETURN_IF_ERROR(ReadRequiredField(params, "factor", where, rope.factor));
    TITAN_RETURN_IF_ERROR(
        ReadRequiredField(params, "low_freq_factor", where, rope.low_freq_factor));
    TITAN_RETURN_IF_ERROR(
        ReadRequiredField(params, "high_freq_factor", where, rope.high_freq_factor));
  } else {
    rope.scaling = RopeScalingType::kYarn;
    // transformers: no factor means the ratio of the context lengths; 0 betas mean the defaults.
    rope.factor = static_cast<double>(max_positions) /
                  static_cast<double>(rope.original_max_position_embeddings);
    rope.beta_fast = kYarnBetaFast;
    rope.beta_slow = kYarnBetaSlow;
    rope.mscale = rope.mscale_all_dim = rope.attention_factor = 0;
    rope.truncate = true;
    TITAN_RETURN_IF_ERROR(ReadOptionalField(params, "factor", where, rope.factor));
    TITAN_RETURN_IF_ERROR(ReadYarnFields(params, where, rope));
    if (rope.beta_fast == 0) rope.beta_fast = kYarnBetaFast;
    if (rope.beta_slow == 0) rope.beta_slow = kYarnBetaSlow;
  }
  if (!(rope.factor > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": factor ", rope.factor, ", expected a positive number"));
  }
  return absl::OkStatus();
}

}  // namespace

json HfConfig(const ModelInfo& info, const std::string& torch_dtype) {
  const TransformerArgs& args = info.args;
  json config = info.spec->hf.extra_config;
  config.update({{"architectures", {info.spec->hf.architecture}},
                 {"model_type", info.spec->hf.model_type},
                 {"attention_bias", false},
                 {"hidden_act", "silu"},
                 {"hidden_size", args.dim},
                 {"intermediate_size", args.ffn_hidden_dim},
                 {"num_attention_heads", args.n_heads},
                 {"num_key_value_heads", args.kv_heads()},
                 {"num_hidden_layers", args.n_layers},
                 {"head_dim", args.head_size()},
                 {"vocab_size", args.vocab_size},
                 {"max_position_embeddings", args.max_seq_len},
                 {"rms_norm_eps", args.norm_eps},
                 {"rope_theta", args.rope.theta},
                 {"rope_scaling", RopeScalingToJson(args.rope)},
                 {"tie_word_embeddings", args.tie_word_embeddings},
                 {"bos_token_id", info.bos_token_id},
                 {"eos_token_id", info.eos_token_id},
                 {"torch_dtype", torch_dtype}});
  if (!info.pad_token_id.is_null()) config["pad_token_id"] = info.pad_token_id;
  return config;
}

json HfGenerationConfig(const ModelInfo& info) {
  // The source's own file carries settings titan does not model (sampling, eos lists).
  if (info.hf_generation_config.is_object()) return info.hf_generation_config;
  json config = {{"_from_model_config", true},
                 {"bos_token_id", info.bos_token_id},
                 {"eos_token_id", info.eos_token_id}};
  if (!info.pad_token_id.is_null()) config["pad_token_id"] = info.pad_token_id;
  return config;
}

absl::StatusOr<ModelInfo> ModelInfoFromHfConfig(const json& config, const std::string& source) {
  if (!config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": expected a JSON object"));
  }
  std::string model_type;
  TITAN_RETURN_IF_ERROR(ReadRequiredField(config, "model_type", source, model_type));
  TITAN_ASSIGN_OR_RETURN(const ModelSpec* spec, FindHfFamily(model_type, source));
  TransformerArgs args = spec->defaults;
  args.norm_eps = 1e-6;  // transformers' defaults for every family titan has
  args.rope.theta = 10000;
  args.n_kv_heads = spec->hf.default_kv_heads;
  TITAN_RETURN_IF_ERROR(ReadRequiredField(config, "hidden_size", source, args.dim));
  TITAN_RETURN_IF_ERROR(ReadRequiredField(config, "num_hidden_layers", source, args.n_layers));
  TITAN_RETURN_IF_ERROR(ReadRequiredField(config, "num_attention_heads", source, args.n_heads));
  TITAN_RETURN_IF_ERROR(ReadRequiredField(config, "vocab_size", source, args.vocab_size));
  TITAN_RETURN_IF_ERROR(
      ReadRequiredField(config, "intermediate_size", source, args.ffn_hidden_dim));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(config, "num_key_value_heads", source, args.n_kv_heads));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(config, "head_dim", source, args.head_dim));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(config, "rms_norm_eps", source, args.norm_eps));
  TITAN_RETURN_IF_ERROR(
      ReadOptionalField(config, "max_position_embeddings", source, args.max_seq_len));
  TITAN_RETURN_IF_ERROR(
      ReadOptionalField(config, "tie_word_embeddings", source, args.tie_word_embeddings));
  TITAN_RETURN_IF_ERROR(CheckRepresentable(config, args.n_layers, source));
  TITAN_RETURN_IF_ERROR(ReadRope(config, args.max_seq_len, source, args.rope));
  TITAN_RETURN_IF_ERROR(ValidateTransformerArgs(args, source));
  ModelInfo info = DescribeModel(*spec, args, config.value("bos_token_id", json()),
                                 config.value("eos_token_id", json()));
  info.pad_token_id = config.value("pad_token_id", json());
  return info;
}

}  // namespace titan
