#include "lib/interop/hf_config.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include "absl/algorithm/container.h"
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

// A JSON number as Python's repr spells it: a float keeps its ".0" (64.0 is no integer there).
std::string NumberText(const json& number) {
  if (!number.is_number_float()) return number.dump();
  char text[32];
  const std::to_chars_result written =
      std::to_chars(text, text + sizeof(text), number.get<double>());
  std::string spelled(text, written.ptr);
  if (spelled.find_first_of(".en") == std::string::npos) spelled += ".0";  // n: nan, inf
  return spelled;
}

// As ReadOptionalField, but an integer key holding a float is refused rather than truncated
// (transformers' strict config classes refuse 64.0 too: "expected int, got float"), and one past
// int64 is refused as out of range, in its spelling, rather than wrapped.
template <typename T>
absl::Status ReadHfField(const json& object, const char* key, const std::string& where, T& out) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const auto it = object.find(key);
    if (it != object.end() && it->is_number()) {
      const bool huge =
          it->is_number_float()
              ? !(std::fabs(it->get<double>()) < 9223372036854775808.0)  // 2^63; also NaN.
              : it->is_number_unsigned() &&
                    it->get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()};
      if (huge) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", key, ": ", NumberText(*it),
                                                       " is out of range (expected an integer)"));
      }
      if (it->is_number_float()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", key, ": ", NumberText(*it),
                                                       ", expected an integer, got a float (as "
                                                       "transformers refuses it)"));
      }
    }
  }
  return ReadOptionalField(object, key, where, out);
}

bool IsNull(const json& object, const char* key) {
  const auto it = object.find(key);
  return it != object.end() && it->is_null();
}

// A null `key` refused, naming the type `out` wants: transformers' strict config classes refuse
// it, or its model code fails on it.
template <typename T>
absl::Status RefuseNull(const json& object, const char* key, const std::string& where,
                        const T& out) {
  if (!IsNull(object, key)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": ", key, " is null; expected a ", json(out).type_name()));
}

// As ReadOptionalField, but a null is refused rather than read as missing.
template <typename T>
absl::Status ReadNotNull(const json& object, const char* key, const std::string& where, T& out) {
  TITAN_RETURN_IF_ERROR(RefuseNull(object, key, where, out));
  return ReadHfField(object, key, where, out);
}

// Whether the family's config class has no field `key`: its model never reads it.
bool FamilyLacks(const HfAdapter::ConfigDefaults& defaults, const char* key) {
  return absl::c_linear_search(defaults.absent_fields, key);
}

// As ReadNotNull for a key the family's config class has; one it lacks, transformers ignores
// whatever its value, and so does titan (`out` keeps its default).
template <typename T>
absl::Status ReadFamilyKey(const json& config, const char* key,
                           const HfAdapter::ConfigDefaults& defaults, const std::string& source,
                           T& out) {
  if (FamilyLacks(defaults, key)) return absl::OkStatus();
  return ReadNotNull(config, key, source, out);
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
// rope_parameters. A null one is 1 but where scaled RoPE multiplies by it (`null_refused`).
absl::Status CheckWholeHeadsRotate(const json& object, const std::string& where,
                                   bool null_refused) {
  double partial_rotary = 1;
  if (null_refused) {
    TITAN_RETURN_IF_ERROR(RefuseNull(object, "partial_rotary_factor", where, partial_rotary));
  }
  TITAN_RETURN_IF_ERROR(ReadHfField(object, "partial_rotary_factor", where, partial_rotary));
  if (partial_rotary != 1) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": partial_rotary_factor ",
                                                   partial_rotary,
                                                   ": titan's decoder rotates whole heads"));
  }
  return absl::OkStatus();
}

// Refuses what the shared decoder cannot compute: one line per config, naming the key.
absl::Status CheckRepresentable(const json& config, int64_t n_layers,
                                const HfAdapter::ConfigDefaults& defaults,
                                const std::string& source) {
  std::string hidden_act = "silu";
  TITAN_RETURN_IF_ERROR(ReadNotNull(config, "hidden_act", source, hidden_act));
  if (hidden_act != "silu") {
    return absl::InvalidArgumentError(absl::StrCat(source, ": hidden_act \"", hidden_act,
                                                   "\": titan's decoder supports only \"silu\""));
  }
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    bool bias = false;
    TITAN_RETURN_IF_ERROR(ReadFamilyKey(config, key, defaults, source, bias));
    if (bias) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", key, " true: titan's decoder has no biases"));
    }
  }
  double attention_dropout = 0;
  TITAN_RETURN_IF_ERROR(ReadNotNull(config, "attention_dropout", source, attention_dropout));
  if (attention_dropout != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": attention_dropout ", attention_dropout,
                     ": titan's decoder has no dropout (expected 0)"));
  }
  TITAN_RETURN_IF_ERROR(CheckWholeHeadsRotate(config, source, false));
  std::vector<std::string> layer_types;
  if (!FamilyLacks(defaults, "layer_types")) {
    TITAN_RETURN_IF_ERROR(ReadHfField(config, "layer_types", source, layer_types));
  }
  for (const std::string& type : layer_types) {
    if (type != "full_attention") {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": layer_types: \"", type, "\": titan's decoder has only full attention"));
    }
  }
  // Without layer_types, Qwen-style configs slide from layer max_window_layers on.
  bool use_sliding_window = false;
  int64_t max_window_layers =
      defaults.max_window_layers > 0 ? defaults.max_window_layers : n_layers;
  TITAN_RETURN_IF_ERROR(
      ReadFamilyKey(config, "use_sliding_window", defaults, source, use_sliding_window));
  TITAN_RETURN_IF_ERROR(
      ReadFamilyKey(config, "max_window_layers", defaults, source, max_window_layers));
  const bool has_window = config.contains("sliding_window") ? !config.at("sliding_window").is_null()
                                                            : defaults.sliding_window > 0;
  if (layer_types.empty() && use_sliding_window && has_window && max_window_layers < n_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": use_sliding_window true: titan's decoder has only full attention"));
  }
  return absl::OkStatus();
}

// Python's truth of a JSON value: null, false, 0 and empty strings, arrays and objects are false.
bool IsTruthy(const json& value) {
  if (value.is_null()) return false;
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number()) return value.get<double>() != 0;
  if (value.is_string() || value.is_array() || value.is_object()) return !value.empty();
  return true;
}

// RoPE from rope_scaling (older transformers) or rope_parameters (transformers 5, with rope_theta
// inside), completed as transformers completes them.
absl::Status ReadRope(const json& config, int64_t max_positions, const std::string& source,
                      RopeConfig& rope) {
  TITAN_RETURN_IF_ERROR(ReadHfField(config, "rope_theta", source, rope.theta));
  rope.scaling = RopeScalingType::kNone;
  // transformers takes `rope_scaling or rope_parameters`: an empty rope_scaling falls through.
  const char* key = nullptr;
  if (config.contains("rope_scaling") && IsTruthy(config.at("rope_scaling"))) {
    key = "rope_scaling";
  } else if (config.contains("rope_parameters") && !config.at("rope_parameters").is_null()) {
    key = "rope_parameters";
  }
  // rope_parameters' own rope_theta, where given, stands in for a null top-level one.
  if (key == nullptr || !config.at(key).is_object() || !config.at(key).contains("rope_theta")) {
    TITAN_RETURN_IF_ERROR(RefuseNull(config, "rope_theta", source, rope.theta));
  }
  if (key == nullptr) return absl::OkStatus();
  const std::string where = absl::StrCat(source, ": ", key);
  const json& params = config.at(key);
  if (!params.is_object()) return absl::InvalidArgumentError(where + ": expected an object");
  std::string type = "default";
  // transformers reads "type" only without "rope_type"; either null names no RoPE function.
  TITAN_RETURN_IF_ERROR(
      ReadNotNull(params, params.contains("rope_type") ? "rope_type" : "type", where, type));
  TITAN_RETURN_IF_ERROR(ReadNotNull(params, "rope_theta", where, rope.theta));
  TITAN_RETURN_IF_ERROR(CheckWholeHeadsRotate(params, where, type != "default"));
  if (type == "default") return absl::OkStatus();
  if (type != "llama3" && type != "yarn") {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": rope_type \"", type, "\": titan supports \"default\", \"llama3\" and \"yarn\""));
  }
  rope.original_max_position_embeddings = max_positions;
  TITAN_RETURN_IF_ERROR(ReadNotNull(params, "original_max_position_embeddings", where,
                                    rope.original_max_position_embeddings));
  // transformers' RoPE functions let a top-level one (Phi-3's place for it) override the dict's.
  TITAN_RETURN_IF_ERROR(ReadNotNull(config, "original_max_position_embeddings", source,
                                    rope.original_max_position_embeddings));
  if (rope.original_max_position_embeddings <= 0) {
    // Named where it was read: the top level overrides the dict's.
    const auto top = config.find("original_max_position_embeddings");
    const bool top_level = top != config.end() && !top->is_null();
    return absl::InvalidArgumentError(absl::StrCat(
        top_level ? source : where, ": original_max_position_embeddings must be positive"));
  }
  if (type == "llama3") {
    rope.scaling = RopeScalingType::kLlama3;
    for (const char* required : {"factor", "low_freq_factor", "high_freq_factor"}) {
      TITAN_RETURN_IF_ERROR(RefuseNull(params, required, where, rope.factor));
    }
    TITAN_RETURN_IF_ERROR(ReadRequiredField(params, "factor", where, rope.factor));
    TITAN_RETURN_IF_ERROR(
        ReadRequiredField(params, "low_freq_factor", where, rope.low_freq_factor));
    TITAN_RETURN_IF_ERROR(
        ReadRequiredField(params, "high_freq_factor", where, rope.high_freq_factor));
  } else {
    rope.scaling = RopeScalingType::kYarn;
    // transformers refuses a yarn without factor; 0 betas mean the defaults.
    rope.beta_fast = kYarnBetaFast;
    rope.beta_slow = kYarnBetaSlow;
    rope.mscale = rope.mscale_all_dim = rope.attention_factor = 0;
    rope.truncate = true;
    // A null factor is transformers' (DeepSeek-V3's) max_position_embeddings over the original.
    if (IsNull(params, "factor")) {
      rope.factor = static_cast<double>(max_positions) /
                    static_cast<double>(rope.original_max_position_embeddings);
    } else {
      TITAN_RETURN_IF_ERROR(ReadRequiredField(params, "factor", where, rope.factor));
    }
    TITAN_RETURN_IF_ERROR(ReadYarnFields(params, where, rope));
    // transformers tests truncate's truth: a null one truncates nothing.
    if (IsNull(params, "truncate")) rope.truncate = false;
    if (rope.beta_fast == 0) rope.beta_fast = kYarnBetaFast;
    if (rope.beta_slow == 0) rope.beta_slow = kYarnBetaSlow;
    // transformers scales cos and sin by any explicit attention_factor: 0 erases positions.
    if (params.contains("attention_factor") && !params.at("attention_factor").is_null() &&
        !(rope.attention_factor > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": attention_factor ", rope.attention_factor, ", expected a positive number"));
    }
  }
  if (!(rope.factor > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": factor ", rope.factor, ", expected a positive number"));
  }
  return absl::OkStatus();
}

// Reads config.json's keys, a missing one as the family's transformers default, and remembers
// which sizes were missing: a refusal they cause names the defaults, not only the numbers.
class DefaultedKeys {
 public:
  DefaultedKeys(const json& config, const std::string& source) : config_(config), source_(source) {}

  // A null value is `null_value`, or refused as transformers' strict config classes refuse it.
  template <typename T>
  absl::Status Read(const char* key, const T& default_value, T& out,
                    std::optional<T> null_value = std::nullopt) {
    const auto it = config_.find(key);
    if (it == config_.end()) {
      out = default_value;
      return absl::OkStatus();
    }
    if (!it->is_null()) return ReadHfField(config_, key, source_, out);
    if (!null_value.has_value()) return RefuseNull(config_, key, source_, default_value);
    out = *null_value;
    return absl::OkStatus();
  }

  // As Read, for a size: a missing one is named by Explain, its default 0 as `derived`.
  absl::Status Size(const char* key, int64_t default_value, int64_t& out,
                    std::optional<int64_t> null_value = std::nullopt,
                    const char* derived = nullptr) {
    if (!config_.contains(key)) {
      missing_.push_back(default_value == 0 && derived != nullptr
                             ? absl::StrCat(key, " as ", derived)
                             : absl::StrCat(key, " ", default_value));
    }
    return Read(key, default_value, out, null_value);
  }

  // `status` with the missing sizes and the defaults taken for them appended.
  absl::Status Explain(absl::Status status) const {
    if (status.ok() || missing_.empty()) return status;
    return absl::Status(status.code(),
                        absl::StrCat(status.message(), " (missing, so ", "transformers' defaults: ",
                                     absl::StrJoin(missing_, ", "), ")"));
  }

 private:
  const json& config_;
  const std::string& source_;
  std::vector<std::string> missing_;
};

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
  TITAN_RETURN_IF_ERROR(RefuseNull(config, "model_type", source, model_type));
  TITAN_RETURN_IF_ERROR(ReadRequiredField(config, "model_type", source, model_type));
  TITAN_ASSIGN_OR_RETURN(const ModelSpec* spec, FindHfFamily(model_type, source));
  const HfAdapter::ConfigDefaults& defaults = spec->hf.config_defaults;
  DefaultedKeys keys(config, source);
  TransformerArgs args = spec->defaults;
  TITAN_RETURN_IF_ERROR(keys.Size("hidden_size", defaults.hidden_size, args.dim));
  TITAN_RETURN_IF_ERROR(keys.Size("num_hidden_layers", defaults.num_hidden_layers, args.n_layers));
  TITAN_RETURN_IF_ERROR(
      keys.Size("num_attention_heads", defaults.num_attention_heads, args.n_heads));
  TITAN_RETURN_IF_ERROR(keys.Size("vocab_size", defaults.vocab_size, args.vocab_size));
  TITAN_RETURN_IF_ERROR(
      keys.Size("intermediate_size", defaults.intermediate_size, args.ffn_hidden_dim));
  // null, in both families, means one key-value head per head (0 here).
  TITAN_RETURN_IF_ERROR(keys.Size("num_key_value_heads", defaults.num_key_value_heads,
                                  args.n_kv_heads, 0, "num_attention_heads"));
  // A derived default (0) is what null means too; a fixed one (Qwen3Config's 128) refuses null.
  TITAN_RETURN_IF_ERROR(keys.Size("head_dim", defaults.head_dim, args.head_dim,
                                  defaults.head_dim == 0 ? std::optional<int64_t>(0) : std::nullopt,
                                  "hidden_size / num_attention_heads"));
  TITAN_RETURN_IF_ERROR(keys.Read("rms_norm_eps", defaults.rms_norm_eps, args.norm_eps));
  TITAN_RETURN_IF_ERROR(
      keys.Read("max_position_embeddings", defaults.max_position_embeddings, args.max_seq_len));
  TITAN_RETURN_IF_ERROR(
      keys.Read("tie_word_embeddings", defaults.tie_word_embeddings, args.tie_word_embeddings));
  args.rope.theta = defaults.rope_theta;
  TITAN_RETURN_IF_ERROR(CheckRepresentable(config, args.n_layers, defaults, source));
  TITAN_RETURN_IF_ERROR(ReadRope(config, args.max_seq_len, source, args.rope));
  if (defaults.heads_divide_hidden_size && args.n_heads > 0 && args.dim % args.n_heads != 0) {
    return keys.Explain(absl::InvalidArgumentError(absl::StrCat(
        source, ": hidden_size ", args.dim, " is not a multiple of num_attention_heads ",
        args.n_heads, " (transformers refuses it for ", model_type, ")")));
  }
  TITAN_RETURN_IF_ERROR(keys.Explain(ValidateTransformerArgs(args, source)));
  ModelInfo info = DescribeModel(*spec, args, config.value("bos_token_id", defaults.bos_token_id),
                                 config.value("eos_token_id", defaults.eos_token_id));
  info.pad_token_id = config.value("pad_token_id", json());
  return info;
}

}  // namespace titan
