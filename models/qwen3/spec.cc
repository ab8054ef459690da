#include "models/qwen3/spec.h"

namespace titan {
namespace {

struct Qwen3Shape {
  const char* name;
  int64_t dim, n_layers, n_heads, n_kv_heads, ffn_hidden_dim;
  bool tied;
  int64_t vocab_size;  // 0: the tokenizer's
};

// Qwen's published config.json shapes; the debug model is torchtitan's qwen3 debugmodel.
constexpr Qwen3Shape kShapes[] = {
    {"debugmodel", 256, 8, 16, 8, 3072, true, 0},
    {"0.6B", 1024, 28, 16, 8, 3072, true, 151936},
    {"1.7B", 2048, 28, 16, 8, 6144, true, 151936},
    {"4B", 2560, 36, 32, 8, 9728, true, 151936},
    {"8B", 4096, 36, 32, 8, 12288, false, 151936},
    {"14B", 5120, 40, 40, 8, 17408, false, 151936},
    {"32B", 5120, 64, 64, 8, 25600, false, 151936},
};

TransformerArgs Defaults() {
  TransformerArgs args;
  args.head_dim = 128;
  args.norm_eps = 1e-6;
  args.qk_norm = true;
  args.rope.theta = 1e6;
  args.rope.layout = RopeLayout::kRotateHalf;
  args.max_seq_len = 40960;
  return args;
}

}  // namespace

ModelSpec Qwen3Spec() {
  ModelSpec spec;
  spec.name = "qwen3";
  for (const Qwen3Shape& shape : kShapes) {
    TransformerArgs args = Defaults();
    args.dim = shape.dim;
    args.n_layers = shape.n_layers;
    args.n_heads = shape.n_heads;
    args.n_kv_heads = shape.n_kv_heads;
    args.ffn_hidden_dim = shape.ffn_hidden_dim;
    args.tie_word_embeddings = shape.tied;
    args.vocab_size = shape.vocab_size;
    spec.flavors.emplace_back(shape.name, args);
  }
  spec.defaults = Defaults();
  spec.hf.model_type = "qwen3";
  spec.hf.architecture = "Qwen3ForCausalLM";
  // Qwen3Config's defaults (transformers 5.24); the others are HfAdapter::ConfigDefaults'.
  HfAdapter::ConfigDefaults& hf_defaults = spec.hf.config_defaults;
  hf_defaults.intermediate_size = 22016;
  hf_defaults.num_key_value_heads = 32;
  hf_defaults.head_dim = 128;
  hf_defaults.vocab_size = 151936;
  hf_defaults.max_position_embeddings = 32768;
  hf_defaults.sliding_window = 4096;
  hf_defaults.max_window_layers = 28;
  hf_defaults.absent_fields = {"mlp_bias"};
  spec.hf.extra_config = {{"attention_dropout", 0.0}, {"initializer_range", 0.02},
                          {"use_cache", true},        {"use_sliding_window", false},
                          {"sliding_window", nullptr}, {"max_window_layers", 28}};
  spec.parallelize = ParallelizeDecoder;
  return spec;
}

TITAN_REGISTER_MODEL(Qwen3Spec);

}  // namespace titan
