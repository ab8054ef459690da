#include "models/llama3/spec.h"

#include <cmath>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/util/json_fields.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// A flavor as Meta describes it: the FFN width comes from multiple_of and a multiplier.
struct Llama3Shape {
  const char* name;
  int64_t dim, n_layers, n_heads, n_kv_heads, multiple_of;
  double ffn_dim_multiplier;
  double rope_factor;  // Llama 3.1: 8, Llama 3.2: 32, none: 0
  bool tied;
  int64_t vocab_size;  // 0: the tokenizer's
};

// torchtitan's debugmodel inherits TransformerModelArgs' default RoPE scaling, Llama 3.1's.
constexpr Llama3Shape kShapes[] = {
    {"debugmodel", 256, 6, 16, 0, 256, 0, 8, false, 0},
    {"1B", 2048, 16, 32, 8, 256, 1.5, 32, true, 128256},
    {"3B", 3072, 28, 24, 8, 256, 1.0, 32, true, 128256},
    {"8B", 4096, 32, 32, 8, 1024, 1.3, 8, false, 128256},
    {"70B", 8192, 80, 64, 8, 4096, 1.3, 8, false, 128256},
    {"405B", 16384, 126, 128, 8, 4096, 1.2, 8, false, 128256},
};

TransformerArgs Defaults() {
  TransformerArgs args;
  args.norm_eps = 1e-5;
  args.rope.theta = 500000;
  args.rope.layout = RopeLayout::kInterleaved;
  args.max_seq_len = 131072;
  return args;
}

// Llama 3.1's scaling by `factor` (Llama 3.2's 1B and 3B: 32), as Meta's reference code fixes it.
void SetLlama3Scaling(double factor, RopeConfig& rope) {
  rope.scaling = RopeScalingType::kLlama3;
  rope.factor = factor;
  rope.low_freq_factor = 1;
  rope.high_freq_factor = 4;
  rope.original_max_position_embeddings = 8192;
}

TransformerArgs FromShape(const Llama3Shape& shape) {
  TransformerArgs args = Defaults();
  args.dim = shape.dim;
  args.n_layers = shape.n_layers;
  args.n_heads = shape.n_heads;
  args.n_kv_heads = shape.n_kv_heads;
  args.vocab_size = shape.vocab_size;
  args.ffn_hidden_dim = FeedForwardHiddenDim(shape.dim, shape.multiple_of, shape.ffn_dim_multiplier);
  args.tie_word_embeddings = shape.tied;
  if (shape.rope_factor > 0) SetLlama3Scaling(shape.rope_factor, args.rope);
  return args;
}

// `args` with the RoPE Meta's reference code uses given params.json's rope_theta and
// use_scaled_rope: unscaled, else Llama 3.1's scaling, or Llama 3.2's factor 32 for the shapes of
// its 1B and 3B. Nothing else about the scaling is written in params.json.
TransformerArgs WithMetaRope(TransformerArgs args, bool scaled) {
  const double theta = args.rope.theta;
  args.rope = Defaults().rope;
  args.rope.theta = theta;
  if (!scaled) return args;
  SetLlama3Scaling(8, args.rope);
  for (const Llama3Shape& shape : kShapes) {
    const TransformerArgs flavor = FromShape(shape);
    TransformerArgs candidate = args;
    candidate.rope.factor = flavor.rope.factor;
    candidate.tie_word_embeddings = flavor.tie_word_embeddings;
    if (flavor.rope.scaling == RopeScalingType::kLlama3 && SameArchitecture(flavor, candidate)) {
      args.rope.factor = flavor.rope.factor;
    }
  }
  return args;
}

std::string DescribeRope(const RopeConfig& rope) {
  if (rope.scaling == RopeScalingType::kNone) return "no RoPE scaling";
  if (rope.scaling != RopeScalingType::kLlama3) return "yarn RoPE scaling";
  return absl::StrCat("llama3 RoPE scaling factor ", rope.factor, ", low_freq_factor ",
                      rope.low_freq_factor, ", high_freq_factor ", rope.high_freq_factor,
                      ", original_max_position_embeddings ", rope.original_max_position_embeddings);
}

// Meta's params.json: the FFN as multiple_of / ffn_dim_multiplier (a flavor's own values, else
// the pair that reproduces the width exactly). RoPE scaling params.json cannot express is refused,
// as is a head_dim other than dim / n_heads.
absl::StatusOr<nlohmann::json> MetaParams(const TransformerArgs& args) {
  // params.json has no head_dim: Meta's reference code splits dim evenly over the heads.
  if (args.head_size() * args.n_heads != args.dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("Meta's params.json cannot express head_dim ", args.head_size(),
                     ": it has no head_dim key and Meta's code uses dim / n_heads = ", args.dim,
                     " / ", args.n_heads));
  }
  const bool scaled = args.rope.scaling != RopeScalingType::kNone;
  const TransformerArgs implied = WithMetaRope(args, scaled);
  if (!SameArchitecture(implied, args)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Meta's params.json cannot express ", DescribeRope(args.rope), ": its use_scaled_rope ",
        scaled ? "true" : "false", " means ", DescribeRope(implied.rope), " for this shape"));
  }
  int64_t multiple_of = args.ffn_hidden_dim;
  double multiplier = 0;
  for (const Llama3Shape& shape : kShapes) {
    if (SameArchitecture(FromShape(shape), args)) {
      multiple_of = shape.multiple_of;
      multiplier = shape.ffn_dim_multiplier;
    }
  }
  const int64_t base = FeedForwardHiddenDim(args.dim, 1, 0);
  if (multiplier == 0 && args.ffn_hidden_dim < base) {
    multiple_of = 1;
    multiplier = (static_cast<double>(args.ffn_hidden_dim) + 0.5) / static_cast<double>(base);
  }
  nlohmann::json params = {{"dim", args.dim},
                           {"n_layers", args.n_layers},
                           {"n_heads", args.n_heads},
                           {"n_kv_heads", args.kv_heads()},
                           {"vocab_size", args.vocab_size},
                           {"multiple_of", multiple_of},
                           {"norm_eps", args.norm_eps},
                           {"rope_theta", args.rope.theta},
                           {"use_scaled_rope", scaled}};
  if (multiplier > 0) params["ffn_dim_multiplier"] = multiplier;
  return params;
}

absl::StatusOr<ModelInfo> DescribeMetaParams(const ModelSpec& spec, const nlohmann::json& params,
                                             const std::string& source) {
  nlohmann::json args_json = params;
  const bool scaled = params.value("use_scaled_rope", false);
  args_json.erase("use_scaled_rope");
  if (args_json.contains("n_kv_heads") && args_json.at("n_kv_heads").is_null()) {
    args_json.erase("n_kv_heads");
  }
  TITAN_ASSIGN_OR_RETURN(TransformerArgs args,
                         TransformerArgsFromJson(args_json, Defaults(), source));
  args = WithMetaRope(args, scaled);
  // Llama 3.2's 1B and 3B tie their head to the embedding.
  for (const Llama3Shape& shape : kShapes) {
    TransformerArgs candidate = args;
    candidate.tie_word_embeddings = shape.tied;
    if (shape.tied && SameArchitecture(FromShape(shape), candidate)) {
      args.tie_word_embeddings = true;
    }
  }
  ModelInfo info = DescribeModel(spec, args);
  if (args.vocab_size == 128256) {  // Llama 3's tokenizer: <|begin_of_text|>, <|end_of_text|>.
    info.bos_token_id = 128000;
    info.eos_token_id = 128001;
  }
  return info;
}

}  // namespace

ModelSpec Llama3Spec() {
  ModelSpec spec;
  spec.name = "llama3";
  for (const Llama3Shape& shape : kShapes) spec.flavors.emplace_back(shape.name, FromShape(shape));
  spec.defaults = Defaults();
  spec.hf.model_type = "llama";
  spec.hf.architecture = "LlamaForCausalLM";
  spec.hf.extra_config = {{"mlp_bias", false},       {"initializer_range", 0.02},
                          {"pretraining_tp", 1},     {"use_cache", true},
                          {"attention_dropout", 0.0}};
  // LlamaConfig's defaults (transformers 5.24) are HfAdapter::ConfigDefaults' but for these.
  spec.hf.config_defaults.bos_token_id = 1;
  spec.hf.config_defaults.eos_token_id = 2;
  spec.hf.config_defaults.heads_divide_hidden_size = true;
  spec.hf.config_defaults.absent_fields = {"use_sliding_window", "max_window_layers",
                                           "layer_types"};
  spec.meta = MetaAdapter{MetaParams, DescribeMetaParams};
  spec.parallelize = ParallelizeDecoder;
  return spec;
}

TITAN_REGISTER_MODEL(Llama3Spec);

}  // namespace titan
