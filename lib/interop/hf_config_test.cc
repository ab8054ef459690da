#include "lib/interop/hf_config.h"

#include <string>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

ModelInfo Flavor(const std::string& family, const std::string& flavor) {
  const ModelSpec& spec = **FindModel(family);
  TransformerArgs args = spec.Flavor(flavor).value();
  if (args.vocab_size == 0) args.vocab_size = 2048;
  return DescribeModel(spec, args, 1, json::array({2, 3}));
}

// A custom Qwen3 shape: head_dim 128 independent of hidden / heads (256 / 16).
ModelInfo SmallQwen3() {
  ModelInfo info = Flavor("qwen3", "debugmodel");
  info.args.n_layers = 4;
  info.args.ffn_hidden_dim = 512;
  info.args.max_seq_len = 256;
  return DescribeModel(*info.spec, info.args, 1, 2);
}

std::string Error(const json& config) {
  return std::string(ModelInfoFromHfConfig(config, "c.json").status().message());
}

TEST(HfConfigTest, RoundTripFindsFamilyAndFlavor) {
  for (const auto& [family, flavor] :
       std::vector<std::pair<std::string, std::string>>{{"llama3", "1B"},
                                                        {"llama3", "8B"},
                                                        {"llama3", "70B"},
                                                        {"qwen3", "0.6B"},
                                                        {"qwen3", "8B"},
                                                        {"qwen3", "32B"}}) {
    const ModelInfo info = Flavor(family, flavor);
    const json config = HfConfig(info, "bfloat16");
    absl::StatusOr<ModelInfo> back = ModelInfoFromHfConfig(config, "config.json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->name(), family);
    EXPECT_EQ(back->flavor, flavor);
    EXPECT_EQ(TransformerArgsToJson(back->args), TransformerArgsToJson(info.args)) << flavor;
    EXPECT_EQ(back->eos_token_id, info.eos_token_id);
    EXPECT_EQ(HfConfig(*back, "bfloat16"), config);
  }
  EXPECT_EQ(HfConfig(Flavor("llama3", "8B"), "bfloat16").at("intermediate_size"), 14336);
}

// Qwen/Qwen3-0.6B's config.json as published (transformers 4.51): the 0.6B flavor.
TEST(HfConfigTest, ReadsAPublishedQwen3Config) {
  const json published = json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
  absl::StatusOr<ModelInfo> info = ModelInfoFromHfConfig(published, "Qwen3-0.6B/config.json");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "qwen3");
  EXPECT_EQ(info->flavor, "0.6B");
  EXPECT_EQ(info->bos_token_id, 151643);
  EXPECT_EQ(info->eos_token_id, 151645);
  EXPECT_EQ(info->args.max_seq_len, 40960);
}

// A config.json without num_key_value_heads means what transformers' class for it defaults to:
// LlamaConfig's num_attention_heads, Qwen3Config's 32 (titan had read Qwen3's as 16 here).
TEST(HfConfigTest, MissingKeyValueHeadsTakeTheFamilysTransformersDefault) {
  json config = json::parse(R"({"model_type": "qwen3", "hidden_size": 1024, "head_dim": 32,
    "num_hidden_layers": 2, "num_attention_heads": 32, "vocab_size": 256,
    "intermediate_size": 3072})");
  absl::StatusOr<ModelInfo> qwen3 = ModelInfoFromHfConfig(config, "c.json");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->args.kv_heads(), 32);
  config["num_attention_heads"] = 16;  // 32 key-value heads cannot serve 16
  // The refusal says the 32 is the default of a missing key.
  EXPECT_THAT(Error(config), HasSubstr("16/32 heads"));
  EXPECT_THAT(Error(config),
              HasSubstr("(missing, so transformers' defaults: num_key_value_heads 32)"));
  config["num_key_value_heads"] = nullptr;  // Qwen3Config: null means one per head
  ASSERT_TRUE(ModelInfoFromHfConfig(config, "c.json").ok());
  EXPECT_EQ(ModelInfoFromHfConfig(config, "c.json")->args.kv_heads(), 16);
  config.erase("num_key_value_heads");
  config["model_type"] = "llama";
  config.erase("head_dim");
  absl::StatusOr<ModelInfo> llama = ModelInfoFromHfConfig(config, "c.json");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(llama->args.kv_heads(), 16);
}

// Every key titan needs has the default transformers' config class gives it (Qwen3Config
// defaults num_attention_heads to 32, titan refused the config as incomplete).
TEST(HfConfigTest, MissingKeysTakeTheFamilysTransformersDefaults) {
  absl::StatusOr<ModelInfo> qwen3 = ModelInfoFromHfConfig(json({{"model_type", "qwen3"}}), "c");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(DescribeArchitecture(qwen3->args),
            "dim 4096, 32 layers, 32/32 heads of 128, ffn 22016, vocab 151936, qk-norm");
  EXPECT_EQ(qwen3->args.max_seq_len, 32768);
  EXPECT_EQ(qwen3->args.rope.theta, 10000);
  EXPECT_TRUE(qwen3->bos_token_id.is_null());
  absl::StatusOr<ModelInfo> llama = ModelInfoFromHfConfig(json({{"model_type", "llama"}}), "c");
  ASSERT_TRUE(llama.ok()) << llama.status();
  EXPECT_EQ(DescribeArchitecture(llama->args),
            "dim 4096, 32 layers, 32/32 heads of 128, ffn 11008, vocab 32000");
  EXPECT_EQ((std::pair(llama->args.max_seq_len, llama->args.norm_eps)), std::pair(2048L, 1e-6));
  EXPECT_EQ(llama->bos_token_id, 1);
  EXPECT_EQ(llama->eos_token_id, 2);
  // LlamaConfig refuses hidden_size not divisible by the heads, head_dim or not.
  EXPECT_EQ(Error(json({{"model_type", "llama"}, {"num_attention_heads", 3}, {"head_dim", 64}})),
            "c.json: hidden_size 4096 is not a multiple of num_attention_heads 3 (transformers "
            "refuses it for llama) (missing, so transformers' defaults: hidden_size 4096, "
            "num_hidden_layers 32, vocab_size 32000, intermediate_size 11008, "
            "num_key_value_heads as num_attention_heads)");
}

TEST(HfConfigTest, WritesTheFamilysIdentityAndConstants) {
  const json qwen = HfConfig(SmallQwen3(), "float32");
  EXPECT_EQ(qwen.at("model_type"), "qwen3");
  EXPECT_EQ(qwen.at("architectures"), json::array({"Qwen3ForCausalLM"}));
  EXPECT_EQ(qwen.at("head_dim"), 128);
  EXPECT_EQ(qwen.at("hidden_size"), 256);
  EXPECT_EQ(qwen.at("use_sliding_window"), false);
  EXPECT_EQ(qwen.at("rms_norm_eps"), 1e-6);
  EXPECT_TRUE(qwen.at("rope_scaling").is_null());
  const json llama = HfConfig(Flavor("llama3", "1B"), "float32");
  EXPECT_EQ(llama.at("architectures"), json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(llama.at("rope_scaling").at("rope_type"), "llama3");
  EXPECT_EQ(llama.at("mlp_bias"), false);
  EXPECT_FALSE(llama.contains("use_sliding_window"));
}

TEST(HfConfigTest, CustomShapesKeepHeadDimAndFeedForwardWidth) {
  for (int64_t width : {160, 100, 171}) {
    json config = HfConfig(SmallQwen3(), "float32");
    config["intermediate_size"] = width;
    absl::StatusOr<ModelInfo> back = ModelInfoFromHfConfig(config, "config.json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->flavor, "");
    EXPECT_EQ(back->args.ffn_hidden_dim, width);
    EXPECT_EQ(back->args.head_size(), 128);
    EXPECT_TRUE(back->args.qk_norm);
    EXPECT_EQ(back->args.rope.layout, RopeLayout::kRotateHalf);
  }
  // Without head_dim, transformers' defaults: hidden / heads for Llama, 128 for Qwen3.
  json llama = HfConfig(Flavor("llama3", "1B"), "float32");
  llama.erase("head_dim");
  EXPECT_EQ(ModelInfoFromHfConfig(llama, "c.json")->args.head_size(), 64);
  json qwen = HfConfig(Flavor("qwen3", "0.6B"), "float32");
  qwen.erase("head_dim");
  EXPECT_EQ(ModelInfoFromHfConfig(qwen, "c.json")->args.head_size(), 128);
}

TEST(HfConfigTest, ReadsTransformers5RopeParameters) {
  json config = HfConfig(Flavor("llama3", "1B"), "float32");
  json rope = config.at("rope_scaling");
  rope["rope_theta"] = 1234.0;
  config.erase("rope_scaling");
  config.erase("rope_theta");
  config["rope_parameters"] = rope;
  absl::StatusOr<ModelInfo> back = ModelInfoFromHfConfig(config, "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->args.rope.theta, 1234.0);
  EXPECT_EQ(back->args.rope.factor, 32);
  EXPECT_EQ(back->args.rope.scaling, RopeScalingType::kLlama3);
  // No RoPE key at all: transformers' default theta.
  config.erase("rope_parameters");
  EXPECT_EQ(ModelInfoFromHfConfig(config, "c.json")->args.rope.theta, 10000);
}

TEST(HfConfigTest, YarnRoundTripsAndIsCompletedAsTransformersDoes) {
  ModelInfo info = SmallQwen3();
  info.args.rope.scaling = RopeScalingType::kYarn;
  info.args.rope.factor = 4;
  info.args.rope.original_max_position_embeddings = 64;
  json config = HfConfig(info, "float32");
  EXPECT_EQ(
      config.at("rope_scaling"),
      json({{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}}));
  absl::StatusOr<ModelInfo> back = ModelInfoFromHfConfig(config, "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SameArchitecture(back->args, info.args)) << DescribeArchitecture(back->args);
  EXPECT_EQ(HfConfig(*back, "float32"), config);

  info.args.rope.beta_fast = 16;
  info.args.rope.truncate = false;
  config = HfConfig(info, "float32");
  EXPECT_EQ(config.at("rope_scaling").at("beta_fast"), 16.0);
  EXPECT_EQ(config.at("rope_scaling").at("truncate"), false);
  EXPECT_TRUE(SameArchitecture(ModelInfoFromHfConfig(config, "c.json")->args, info.args));

  // transformers: beta 0 means the default; a yarn without factor is refused (5.24).
  config["rope_scaling"] = {
      {"type", "yarn"}, {"factor", 8}, {"original_max_position_embeddings", 32}, {"beta_slow", 0}};
  back = ModelInfoFromHfConfig(config, "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->args.rope.beta_slow, 1);
  config["rope_scaling"].erase("factor");
  EXPECT_EQ(Error(config), "c.json: rope_scaling: missing key \"factor\"");
  // An explicit attention_factor scales cos and sin as given: 0 would erase the positions.
  config["rope_scaling"]["factor"] = 1;
  config["rope_scaling"]["attention_factor"] = 0;
  EXPECT_EQ(Error(config), "c.json: rope_scaling: attention_factor 0, expected a positive number");
}

TEST(HfConfigTest, AnEmptyRopeScalingFallsThroughToRopeParameters) {
  json config = HfConfig(SmallQwen3(), "float32");
  config["rope_scaling"] = json::object();
  config["rope_parameters"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  absl::StatusOr<ModelInfo> back = ModelInfoFromHfConfig(config, "c.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->args.rope.scaling, RopeScalingType::kYarn);
  EXPECT_EQ(back->args.rope.original_max_position_embeddings, 64);
  // Written back as rope_scaling, read again as the same yarn.
  EXPECT_EQ(HfConfig(*back, "float32").at("rope_scaling").at("rope_type"), "yarn");
  // rope_parameters' rope_theta stands in for a null top-level one.
  config["rope_theta"] = nullptr;
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  back = ModelInfoFromHfConfig(config, "c.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->args.rope.theta, 5e5);
}

TEST(HfConfigTest, ATopLevelOriginalMaxPositionEmbeddingsOverridesScaledRopes) {
  ModelInfo info = SmallQwen3();
  info.args.rope.scaling = RopeScalingType::kYarn;
  info.args.rope.factor = 4;
  info.args.rope.original_max_position_embeddings = 128;
  json config = HfConfig(info, "float32");
  config["original_max_position_embeddings"] = 32;
  absl::StatusOr<ModelInfo> back = ModelInfoFromHfConfig(config, "c.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->args.rope.original_max_position_embeddings, 32);
  EXPECT_EQ(HfConfig(*back, "float32").at("rope_scaling").at("original_max_position_embeddings"),
            32);
  // A bad value is named where it was read.
  config["original_max_position_embeddings"] = 0;
  EXPECT_EQ(Error(config), "c.json: original_max_position_embeddings must be positive");
  config["original_max_position_embeddings"] = nullptr;
  EXPECT_EQ(Error(config), "c.json: original_max_position_embeddings is null; expected a number");
  // Unscaled RoPE has no use for it.
  config.erase("rope_scaling");
  EXPECT_TRUE(ModelInfoFromHfConfig(config, "c.json").ok());
}

TEST(HfConfigTest, RefusesWhatTheDecoderCannotRepresentInOneLine) {
  const json good = HfConfig(SmallQwen3(), "float32");
  json bias = good;
  bias["attention_bias"] = true;
  EXPECT_EQ(Error(bias), "c.json: attention_bias true: titan's decoder has no biases");
  json act = good;
  act["hidden_act"] = "gelu";
  EXPECT_EQ(Error(act), "c.json: hidden_act \"gelu\": titan's decoder supports only \"silu\"");
  json dropout = good;
  dropout["attention_dropout"] = 0.1;  // transformers would train with it; titan cannot
  EXPECT_EQ(Error(dropout),
            "c.json: attention_dropout 0.1: titan's decoder has no dropout (expected 0)");
  json sliding = good;
  sliding["use_sliding_window"] = true;
  sliding["sliding_window"] = 4096;
  sliding["max_window_layers"] = 2;
  EXPECT_EQ(Error(sliding),
            "c.json: use_sliding_window true: titan's decoder has only full attention");
  sliding["max_window_layers"] = 28;  // every layer below it attends fully: nothing slides
  EXPECT_TRUE(ModelInfoFromHfConfig(sliding, "c.json").ok());
  sliding["layer_types"] = {"full_attention", "sliding_attention", "full_attention",
                            "full_attention"};
  EXPECT_THAT(Error(sliding), HasSubstr("c.json: layer_types: \"sliding_attention\""));
  // Keys a family's config class lacks are ignored whatever their value, as transformers'
  // model ignores them: Qwen3's MLP has no bias, Llama's attention no window.
  json qwen3_mlp_bias = good;
  qwen3_mlp_bias["mlp_bias"] = true;
  EXPECT_TRUE(ModelInfoFromHfConfig(qwen3_mlp_bias, "c.json").ok());
  json llama_sliding = HfConfig(Flavor("llama3", "debugmodel"), "float32");
  llama_sliding["use_sliding_window"] = true;
  llama_sliding["sliding_window"] = 4;
  llama_sliding["max_window_layers"] = 0;
  llama_sliding["layer_types"] = {"sliding_attention", "full_attention"};
  EXPECT_TRUE(ModelInfoFromHfConfig(llama_sliding, "c.json").ok());
  llama_sliding["mlp_bias"] = true;  // LlamaConfig has it, and its MLP would have biases
  EXPECT_EQ(Error(llama_sliding), "c.json: mlp_bias true: titan's decoder has no biases");
  json rope = good;
  rope["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  EXPECT_EQ(Error(rope),
            "c.json: rope_scaling: rope_type \"dynamic\": titan supports \"default\", "
            "\"llama3\" and \"yarn\"");
  json partial = good;
  partial["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  partial.erase("rope_scaling");
  EXPECT_THAT(Error(partial), HasSubstr("c.json: rope_parameters: partial_rotary_factor 0.5"));
  json type = good;
  type["model_type"] = "mistral";
  EXPECT_EQ(Error(type),
            "c.json: model_type \"mistral\" is not supported; known: \"llama\" "
            "(llama3), \"qwen3\" (qwen3)");
  json null_size = good;
  null_size["hidden_size"] = nullptr;  // transformers' strict config refuses a null int
  EXPECT_EQ(Error(null_size), "c.json: hidden_size is null; expected a number");
  json wrong_type = good;
  wrong_type["num_hidden_layers"] = "two";
  EXPECT_THAT(Error(wrong_type), HasSubstr("num_hidden_layers: unexpected string"));
  // A float size is refused, not truncated (transformers' strict config: "expected int, got
  // float", 64.0 too); one past int64 is out of range, as written, not wrapped.
  for (const auto& [key, number, expected] :
       {std::tuple("hidden_size", "64.5", "c.json: hidden_size: 64.5, expected an integer"),
        std::tuple("hidden_size", "64.0", "c.json: hidden_size: 64.0, expected an integer"),
        std::tuple("vocab_size", "1e20", "c.json: vocab_size: 1e+20 is out of range"),
        std::tuple("vocab_size", "18446744073709551615",
                   "c.json: vocab_size: 18446744073709551615 is out of range"),
        std::tuple("max_position_embeddings", "4096.5",
                   "c.json: max_position_embeddings: 4096.5, expected an integer")}) {
    json sized = good;
    sized[key] = json::parse(number);
    EXPECT_THAT(Error(sized), HasSubstr(expected)) << key << " " << number;
  }
  json heads = good;
  heads["num_key_value_heads"] = 5;
  EXPECT_THAT(Error(heads), HasSubstr("c.json: inconsistent model args"));
  EXPECT_EQ(Error(json::array()), "c.json: expected a JSON object");
}

}  // namespace
}  // namespace titan
