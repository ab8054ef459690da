#include "lib/model/transformer_args.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/util/json_fields.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

const char* RopeScalingName(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kLlama3:
      return "llama3";
    case RopeScalingType::kYarn:
      return "yarn";
    case RopeScalingType::kNone:
      break;
  }
  return "none";
}

absl::Status ReadRope(const json& object, const std::string& source, RopeConfig& rope) {
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "enabled", source, rope.enabled));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "theta", source, rope.theta));
  std::string layout = rope.layout == RopeLayout::kRotateHalf ? "rotate_half" : "interleaved";
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "layout", source, layout));
  if (layout != "interleaved" && layout != "rotate_half") {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": layout \"", layout, "\", expected \"interleaved\" or \"rotate_half\""));
  }
  rope.layout = layout == "rotate_half" ? RopeLayout::kRotateHalf : RopeLayout::kInterleaved;
  std::string scaling = RopeScalingName(rope.scaling);
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "scaling", source, scaling));
  if (scaling == "none") {
    rope.scaling = RopeScalingType::kNone;
  } else if (scaling == "llama3") {
    rope.scaling = RopeScalingType::kLlama3;
  } else if (scaling == "yarn") {
    rope.scaling = RopeScalingType::kYarn;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": scaling \"", scaling, "\", expected \"none\", \"llama3\" or \"yarn\""));
  }
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "factor", source, rope.factor));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "original_max_position_embeddings", source,
                                          rope.original_max_position_embeddings));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "low_freq_factor", source, rope.low_freq_factor));
  TITAN_RETURN_IF_ERROR(
      ReadOptionalField(object, "high_freq_factor", source, rope.high_freq_factor));
  return ReadYarnFields(object, source, rope);
}

json RopeToJson(const RopeConfig& rope) {
  json out = {{"enabled", rope.enabled},
              {"theta", rope.theta},
              {"layout", rope.layout == RopeLayout::kRotateHalf ? "rotate_half" : "interleaved"},
              {"scaling", RopeScalingName(rope.scaling)}};
  if (rope.scaling != RopeScalingType::kNone) {
    out["factor"] = rope.factor;
    out["original_max_position_embeddings"] = rope.original_max_position_embeddings;
  }
  if (rope.scaling == RopeScalingType::kLlama3) {
    out["low_freq_factor"] = rope.low_freq_factor;
    out["high_freq_factor"] = rope.high_freq_factor;
  }
  if (rope.scaling == RopeScalingType::kYarn) {
    out["beta_fast"] = rope.beta_fast;
    out["beta_slow"] = rope.beta_slow;
    out["mscale"] = rope.mscale;
    out["mscale_all_dim"] = rope.mscale_all_dim;
    out["attention_factor"] = rope.attention_factor;
    out["truncate"] = rope.truncate;
  }
  return out;
}

double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

bool SameRope(const RopeConfig& a, const RopeConfig& b) {
  if (a.enabled != b.enabled) return false;
  if (!a.enabled) return true;
  if (a.theta != b.theta || a.layout != b.layout || a.scaling != b.scaling) return false;
  switch (a.scaling) {
    case RopeScalingType::kNone:
      return true;
    case RopeScalingType::kLlama3:
      return a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
             a.high_freq_factor == b.high_freq_factor &&
             a.original_max_position_embeddings == b.original_max_position_embeddings;
    case RopeScalingType::kYarn:
      return a.factor == b.factor &&
             a.original_max_position_embeddings == b.original_max_position_embeddings &&
             a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow &&
             YarnAttentionFactor(a) == YarnAttentionFactor(b) && a.truncate == b.truncate;
  }
  return false;
}

}  // namespace

double YarnAttentionFactor(const RopeConfig& rope) {
  if (rope.attention_factor > 0) return rope.attention_factor;
  // transformers tests the two for truth: any nonzero pair is used.
  return rope.mscale != 0 && rope.mscale_all_dim != 0
             ? YarnMscale(rope.factor, rope.mscale) / YarnMscale(rope.factor, rope.mscale_all_dim)
             : YarnMscale(rope.factor, 1);
}

absl::Status ReadYarnFields(const json& object, const std::string& source, RopeConfig& rope) {
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "beta_fast", source, rope.beta_fast));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "beta_slow", source, rope.beta_slow));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "mscale", source, rope.mscale));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "mscale_all_dim", source, rope.mscale_all_dim));
  TITAN_RETURN_IF_ERROR(
      ReadOptionalField(object, "attention_factor", source, rope.attention_factor));
  return ReadOptionalField(object, "truncate", source, rope.truncate);
}

int64_t FeedForwardHiddenDim(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier) {
  int64_t hidden = 2 * (4 * dim) / 3;
  if (ffn_dim_multiplier > 0) hidden = static_cast<int64_t>(ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

absl::Status ValidateTransformerArgs(const TransformerArgs& args, const std::string& source) {
  const bool sizes_ok = args.dim > 0 && args.n_layers > 0 && args.n_heads > 0 &&
                        args.kv_heads() > 0 && args.vocab_size > 0 && args.ffn_hidden_dim > 0 &&
                        args.head_size() > 0 && args.max_seq_len > 0;
  if (!sizes_ok || args.n_heads % args.kv_heads() != 0 ||
      (args.head_dim <= 0 && args.dim % args.n_heads != 0) || args.head_size() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": inconsistent model args (", DescribeArchitecture(args),
        "): expected positive sizes, n_heads divisible by n_kv_heads, an even head size (dim / "
        "n_heads when head_dim is not given)"));
  }
  // A factor <= 0 gives infinite or negative frequencies (transformers computes them all the same).
  if (args.rope.scaling != RopeScalingType::kNone && !(args.rope.factor > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": rope factor ", args.rope.factor, ", expected a positive number"));
  }
  return absl::OkStatus();
}

json TransformerArgsToJson(const TransformerArgs& args) {
  return {{"dim", args.dim},
          {"n_layers", args.n_layers},
          {"n_heads", args.n_heads},
          {"n_kv_heads", args.kv_heads()},
          {"head_dim", args.head_size()},
          {"vocab_size", args.vocab_size},
          {"ffn_hidden_dim", args.ffn_hidden_dim},
          {"norm_eps", args.norm_eps},
          {"rope", RopeToJson(args.rope)},
          {"max_seq_len", args.max_seq_len},
          {"tie_word_embeddings", args.tie_word_embeddings},
          {"qk_norm", args.qk_norm}};
}

absl::StatusOr<TransformerArgs> TransformerArgsFromJson(const json& object,
                                                        const TransformerArgs& base,
                                                        const std::string& source) {
  if (!object.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a JSON object of model args, got ", object.type_name()));
  }
  TransformerArgs args = base;
  TITAN_RETURN_IF_ERROR(ReadRequiredField(object, "dim", source, args.dim));
  TITAN_RETURN_IF_ERROR(ReadRequiredField(object, "n_layers", source, args.n_layers));
  TITAN_RETURN_IF_ERROR(ReadRequiredField(object, "n_heads", source, args.n_heads));
  TITAN_RETURN_IF_ERROR(ReadRequiredField(object, "vocab_size", source, args.vocab_size));
  args.n_kv_heads = 0;
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "n_kv_heads", source, args.n_kv_heads));
  args.head_dim = 0;
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "head_dim", source, args.head_dim));
  if (object.contains("ffn_hidden_dim")) {
    TITAN_RETURN_IF_ERROR(ReadRequiredField(object, "ffn_hidden_dim", source, args.ffn_hidden_dim));
  } else {
    // Checkpoints from before the shared decoder describe Llama's FFN by its rounding rule.
    int64_t multiple_of = 256;
    double multiplier = 0;
    TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "multiple_of", source, multiple_of));
    TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "ffn_dim_multiplier", source, multiplier));
    if (multiple_of <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": multiple_of must be positive"));
    }
    args.ffn_hidden_dim = FeedForwardHiddenDim(args.dim, multiple_of, multiplier);
  }
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "norm_eps", source, args.norm_eps));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "max_seq_len", source, args.max_seq_len));
  TITAN_RETURN_IF_ERROR(
      ReadOptionalField(object, "tie_word_embeddings", source, args.tie_word_embeddings));
  TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "qk_norm", source, args.qk_norm));
  if (const auto rope = object.find("rope"); rope != object.end()) {
    if (!rope->is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": rope: expected an object"));
    }
    TITAN_RETURN_IF_ERROR(ReadRope(*rope, source + ": rope", args.rope));
  } else {
    // The older layout: rope_theta and an optional Llama 3 rope_scaling object.
    TITAN_RETURN_IF_ERROR(ReadOptionalField(object, "rope_theta", source, args.rope.theta));
    const auto scaling = object.find("rope_scaling");
    if (scaling != object.end() && !scaling->is_null()) {
      const std::string where = source + ": rope_scaling";
      if (!scaling->is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": expected an object"));
      }
      args.rope.scaling = RopeScalingType::kLlama3;
      TITAN_RETURN_IF_ERROR(ReadRequiredField(*scaling, "factor", where, args.rope.factor));
      TITAN_RETURN_IF_ERROR(
          ReadOptionalField(*scaling, "low_freq_factor", where, args.rope.low_freq_factor));
      TITAN_RETURN_IF_ERROR(
          ReadOptionalField(*scaling, "high_freq_factor", where, args.rope.high_freq_factor));
      TITAN_RETURN_IF_ERROR(ReadOptionalField(*scaling, "original_max_position_embeddings", where,
                                              args.rope.original_max_position_embeddings));
    } else {
      args.rope.scaling = RopeScalingType::kNone;
    }
  }
  TITAN_RETURN_IF_ERROR(ValidateTransformerArgs(args, source));
  return args;
}

bool SameArchitecture(const TransformerArgs& a, const TransformerArgs& b) {
  return a.dim == b.dim && a.n_layers == b.n_layers && a.n_heads == b.n_heads &&
         a.kv_heads() == b.kv_heads() && a.head_size() == b.head_size() &&
         a.ffn_hidden_dim == b.ffn_hidden_dim && a.norm_eps == b.norm_eps &&
         SameRope(a.rope, b.rope) && a.tie_word_embeddings == b.tie_word_embeddings &&
         a.qk_norm == b.qk_norm;
}

std::string DescribeArchitecture(const TransformerArgs& args) {
  return absl::StrFormat("dim %d, %d layers, %d/%d heads of %d, ffn %d, vocab %d%s%s", args.dim,
                         args.n_layers, args.n_heads, args.kv_heads(), args.head_size(),
                         args.ffn_hidden_dim, args.vocab_size,
                         args.tie_word_embeddings ? ", tied" : "", args.qk_norm ? ", qk-norm" : "");
}

}  // namespace titan
