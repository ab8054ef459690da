#ifndef TITAN_LIB_MODEL_TRANSFORMER_ARGS_H_
#define TITAN_LIB_MODEL_TRANSFORMER_ARGS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace titan {

// How rotary position embeddings pair the dimensions of a head.
enum class RopeLayout {
  kInterleaved,  // (2i, 2i+1): Meta's complex-number layout (titan's Llama 3)
  kRotateHalf,   // (i, i + D/2): Hugging Face's layout (Qwen3)
};

// How RoPE frequencies are stretched for long contexts.
enum class RopeScalingType {
  kNone,    // plain theta^(-2i/D)
  kLlama3,  // Llama 3.1's smoothed per-band scaling
  kYarn,    // YaRN (NTK-by-parts interpolation plus a cos/sin attention factor)
};

struct RopeConfig {
  bool enabled = true;  // false: no positional rotation at all
  double theta = 10000;
  RopeLayout layout = RopeLayout::kInterleaved;
  RopeScalingType scaling = RopeScalingType::kNone;
  double factor = 1;
  int64_t original_max_position_embeddings = 8192;
  // Llama 3 scaling.
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  // YaRN (Hugging Face's names and defaults); attention_factor <= 0: derived from factor/mscale.
  double beta_fast = 32;
  double beta_slow = 1;
  double mscale = 0;
  double mscale_all_dim = 0;
  double attention_factor = 0;
  bool truncate = true;
};

// The architecture of a dense decoder-only transformer: everything that decides parameter shapes
// and the forward pass. A model family is a table of these (flavors) plus adapters; the decoder in
// lib/model builds any of them.
struct TransformerArgs {
  int64_t dim = 4096;
  int64_t n_layers = 32;
  int64_t n_heads = 32;
  int64_t n_kv_heads = 0;  // 0: n_heads (multi-head attention)
  int64_t head_dim = 0;    // 0: dim / n_heads
  int64_t vocab_size = 128256;
  int64_t ffn_hidden_dim = 14336;
  double norm_eps = 1e-5;
  RopeConfig rope;
  int64_t max_seq_len = 131072;
  bool tie_word_embeddings = false;
  bool qk_norm = false;  // RMSNorm over each head of q and k before RoPE (Qwen3)

  int64_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  // 0 without heads, so that validating (and describing) untrusted args never divides by zero.
  int64_t head_size() const { return head_dim > 0 ? head_dim : n_heads > 0 ? dim / n_heads : 0; }
};

// Llama's FFN width: 2/3 of 4·dim, times the multiplier (if > 0), rounded up to `multiple_of`.
int64_t FeedForwardHiddenDim(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier);

// Positive sizes, heads divisible by KV heads, an even head size, a positive RoPE scaling factor.
// `source` prefixes the error.
absl::Status ValidateTransformerArgs(const TransformerArgs& args, const std::string& source);

// The architecture as JSON (checkpoints record it; titan_train can start from it) and back.
// Reading starts from `base` (a family's defaults), so keys a file lacks keep the family's values;
// older titan checkpoints' Llama keys (multiple_of, ffn_dim_multiplier, rope_scaling) are read too.
nlohmann::json TransformerArgsToJson(const TransformerArgs& args);
absl::StatusOr<TransformerArgs> TransformerArgsFromJson(const nlohmann::json& json,
                                                        const TransformerArgs& base,
                                                        const std::string& source);

// YaRN's optional keys (beta_fast, beta_slow, mscale, mscale_all_dim, attention_factor, truncate):
// the same names in titan's `rope` object and in HF's rope_scaling. Absent keys keep `rope`'s.
absl::Status ReadYarnFields(const nlohmann::json& object, const std::string& source,
                            RopeConfig& rope);

// The factor YaRN scales cos and sin by: attention_factor when set (> 0), else transformers'
// default from factor, and mscale over mscale_all_dim when both are nonzero.
double YarnAttentionFactor(const RopeConfig& rope);

// Whether two architectures build the same model (vocab_size and max_seq_len aside): YaRN's
// mscale, mscale_all_dim and attention_factor through the attention factor they give.
bool SameArchitecture(const TransformerArgs& a, const TransformerArgs& b);

// One line naming the main sizes, e.g. "dim 576, 30 layers, 9/3 heads of 64, ffn 1536, vocab
// 49152, tied": shape-mismatch errors print it for both sides.
std::string DescribeArchitecture(const TransformerArgs& args);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_TRANSFORMER_ARGS_H_
