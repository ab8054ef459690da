#include "lib/interop/llama3_hf.h"

#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/model/transformer_ops.h"

namespace titan {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

Llama3Args SmallArgs() {
  Llama3Args args;
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 96;
  args.multiple_of = 32;
  args.max_seq_len = 64;
  args.rope_scaling = {8, 1, 4, 16};
  return args;
}

TEST(Llama3HfTest, NamesMapBothWaysForEveryParameter) {
  std::set<std::string> hf_names;
  for (const auto& [name, shape] : Llama3ParameterShapes(SmallArgs())) {
    absl::StatusOr<std::string> hf = TitanToHfName(name);
    ASSERT_TRUE(hf.ok()) << hf.status();
    hf_names.insert(*hf);
    EXPECT_EQ(*HfToTitanName(*hf), name);
  }
  EXPECT_EQ(hf_names.size(), 2u * 9 + 3);
  EXPECT_EQ(*TitanToHfName("layers.1.feed_forward.w1.weight"), "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(*TitanToHfName("layers.0.feed_forward.w3.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(*TitanToHfName("layers.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(*TitanToHfName("output.weight"), "lm_head.weight");
  EXPECT_THAT(HfToTitanName("model.layers.x.mlp.gate_proj.weight").status().message(),
              HasSubstr("not a LlamaForCausalLM parameter"));
  EXPECT_FALSE(TitanToHfName("layers.0.attention.wq.bias").ok());
}

TEST(Llama3HfTest, PermutationIsInvertibleAndMovesPairsToHalves) {
  const at::Tensor w = at::arange(2 * 8 * 3, at::kFloat).view({16, 3});  // 2 heads of dim 8
  const at::Tensor hf = InterleavedToRotateHalf(w, 2);
  EXPECT_TRUE(RotateHalfToInterleaved(hf, 2).equal(w));
  // Head 0's interleaved rows (0,1),(2,3),(4,5),(6,7) become halves 0,2,4,6 | 1,3,5,7.
  const std::vector<int64_t> order = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
  for (int64_t i = 0; i < 16; ++i) EXPECT_TRUE(hf[i].equal(w[order[i]])) << i;
}

// Rotate-half RoPE as transformers applies it: x * cos + rotate_half(x) * sin.
at::Tensor RotateHalfRope(const at::Tensor& x, const RopeTables& rope) {
  const int64_t seq = x.size(1), half = x.size(-1) / 2;
  at::Tensor cos = at::cat({rope.cos, rope.cos}, -1).slice(0, 0, seq).unsqueeze(0).unsqueeze(2);
  at::Tensor sin = at::cat({rope.sin, rope.sin}, -1).slice(0, 0, seq).unsqueeze(0).unsqueeze(2);
  at::Tensor rotated = at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

// The permuted projection under rotate-half RoPE gives titan's RoPE output, rows permuted alike.
TEST(Llama3HfTest, PermutedWeightsUnderRotateHalfRopeMatchInterleavedRope) {
  const Llama3Args args = SmallArgs();
  at::manual_seed(0);
  const int64_t heads = args.n_heads, head_dim = args.head_dim(), seq = 5;
  const at::Tensor wq = at::randn({heads * head_dim, args.dim}, at::kDouble);
  const at::Tensor x = at::randn({1, seq, args.dim}, at::kDouble);
  RopeTables rope = ComputeRopeTables(head_dim, args.max_seq_len, args.rope_theta, args.rope_scaling,
                                      at::TensorOptions());
  rope = {rope.cos.to(at::kDouble), rope.sin.to(at::kDouble)};

  const at::Tensor titan = ApplyRotaryEmbedding(
      at::linear(x, wq).view({1, seq, heads, head_dim}), rope);  // interleaved layout
  const at::Tensor hf_weight = TitanTensorToHf("layers.0.attention.wq.weight", wq, args);
  const at::Tensor hf = RotateHalfRope(at::linear(x, hf_weight).view({1, seq, heads, head_dim}),
                                       rope);
  const at::Tensor titan_permuted =
      InterleavedToRotateHalf(titan.reshape({seq, heads * head_dim}).t(), heads)
          .t()
          .reshape({1, seq, heads, head_dim});
  // ApplyRotaryEmbedding computes in fp32; the permutation itself is exact.
  EXPECT_TRUE(at::allclose(hf, titan_permuted, 1e-5, 1e-5));
  EXPECT_TRUE(HfTensorToTitan("layers.0.attention.wq.weight", hf_weight, args).equal(wq));
  const at::Tensor wk = at::randn({args.kv_heads() * head_dim, args.dim});
  EXPECT_TRUE(HfTensorToTitan("layers.1.attention.wk.weight",
                              TitanTensorToHf("layers.1.attention.wk.weight", wk, args), args)
                  .equal(wk));
  EXPECT_TRUE(TitanTensorToHf("layers.0.attention.wv.weight", wk, args).equal(wk));
}

TEST(Llama3HfTest, ConfigRoundTripFindsTheFlavor) {
  for (const std::string& flavor : {"1B", "8B", "70B"}) {
    Llama3ModelInfo info;
    info.args = *Llama3Flavor(flavor);
    info.bos_token_id = 128000;
    info.eos_token_id = json::array({128001, 128009});
    const json config = Llama3HfConfig(info, "bfloat16");
    absl::StatusOr<Llama3ModelInfo> back = Llama3ModelInfoFromHfConfig(config, "config.json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->flavor, flavor);
    EXPECT_EQ(Llama3ArgsToJson(back->args), Llama3ArgsToJson(info.args));
    EXPECT_EQ(back->eos_token_id, info.eos_token_id);
    EXPECT_EQ(Llama3HfConfig(*back, "bfloat16"), config);
  }
  EXPECT_EQ(Llama3HfConfig({*Llama3Flavor("8B")}, "bfloat16").at("intermediate_size"), 14336);
}

TEST(Llama3HfTest, CustomShapesKeepTheirFeedForwardWidth) {
  Llama3ModelInfo info;
  info.args = SmallArgs();
  for (int64_t width : {160, 100, 171}) {
    json config = Llama3HfConfig(info, "float32");
    config["intermediate_size"] = width;
    absl::StatusOr<Llama3ModelInfo> back = Llama3ModelInfoFromHfConfig(config, "config.json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->flavor, "");
    EXPECT_EQ(back->args.ffn_hidden_dim(), width);
    EXPECT_EQ(back->args.rope_scaling.original_max_position_embeddings, 16);
  }
}

TEST(Llama3HfTest, ReadsTransformers5RopeParameters) {
  Llama3ModelInfo info;
  info.args = SmallArgs();
  json config = Llama3HfConfig(info, "float32");
  json rope = config.at("rope_scaling");
  rope["rope_theta"] = 1234.0;
  config.erase("rope_scaling");
  config.erase("rope_theta");
  config["rope_parameters"] = rope;
  absl::StatusOr<Llama3ModelInfo> back = Llama3ModelInfoFromHfConfig(config, "config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->args.rope_theta, 1234.0);
  EXPECT_EQ(back->args.rope_scaling.factor, 8);
}

TEST(Llama3HfTest, RejectsWhatTitanCannotRepresent) {
  Llama3ModelInfo info;
  info.args = SmallArgs();
  const json good = Llama3HfConfig(info, "float32");
  json bias = good;
  bias["attention_bias"] = true;
  EXPECT_THAT(Llama3ModelInfoFromHfConfig(bias, "c.json").status().message(),
              HasSubstr("no biases"));
  json rope = good;
  rope["rope_scaling"]["rope_type"] = "yarn";
  EXPECT_THAT(Llama3ModelInfoFromHfConfig(rope, "c.json").status().message(),
              HasSubstr("c.json: rope_scaling: rope_type \"yarn\""));
  json missing = good;
  missing.erase("hidden_size");
  EXPECT_THAT(Llama3ModelInfoFromHfConfig(missing, "c.json").status().message(),
              HasSubstr("missing key \"hidden_size\""));
  json wrong_type = good;
  wrong_type["num_hidden_layers"] = "two";
  EXPECT_THAT(Llama3ModelInfoFromHfConfig(wrong_type, "c.json").status().message(),
              HasSubstr("num_hidden_layers: unexpected string"));
  json head_dim = good;
  head_dim["head_dim"] = 32;
  EXPECT_THAT(Llama3ModelInfoFromHfConfig(head_dim, "c.json").status().message(),
              HasSubstr("head_dim 32, expected 16"));
}

TEST(Llama3HfTest, ModelInfoJsonRoundTrip) {
  Llama3ModelInfo info;
  info.args = SmallArgs();
  info.bos_token_id = 1;
  absl::StatusOr<Llama3ModelInfo> back =
      Llama3ModelInfoFromJson(Llama3ModelInfoToJson(info), "manifest.json: state.model");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Llama3ArgsToJson(back->args), Llama3ArgsToJson(info.args));
  EXPECT_EQ(back->bos_token_id, 1);
  EXPECT_TRUE(back->eos_token_id.is_null());
  json bad = Llama3ModelInfoToJson(info);
  bad["args"]["n_heads"] = 5;
  EXPECT_THAT(Llama3ModelInfoFromJson(bad, "m").status().message(),
              HasSubstr("m: args: inconsistent model args"));
}

}  // namespace
}  // namespace titan
