#include "lib/model/transformer_args.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(TransformerArgsTest, FeedForwardHiddenDimMatchesLlamaShapes) {
  EXPECT_EQ(FeedForwardHiddenDim(256, 256, 0), 768);       // debugmodel
  EXPECT_EQ(FeedForwardHiddenDim(4096, 1024, 1.3), 14336);  // Llama 3.1 8B
  EXPECT_EQ(FeedForwardHiddenDim(8192, 4096, 1.3), 28672);  // 70B
  EXPECT_EQ(FeedForwardHiddenDim(16384, 4096, 1.2), 53248);  // 405B
  EXPECT_EQ(FeedForwardHiddenDim(2048, 256, 1.5), 8192);    // Llama 3.2 1B
}

TEST(TransformerArgsTest, JsonRoundTripKeepsEveryField) {
  TransformerArgs args;
  args.dim = 576;
  args.n_layers = 30;
  args.n_heads = 9;
  args.n_kv_heads = 3;
  args.head_dim = 64;
  args.vocab_size = 49152;
  args.ffn_hidden_dim = 1536;
  args.norm_eps = 1e-6;
  args.tie_word_embeddings = true;
  args.qk_norm = true;
  args.rope.layout = RopeLayout::kRotateHalf;
  args.rope.scaling = RopeScalingType::kYarn;
  args.rope.factor = 4;
  args.rope.beta_fast = 16;
  absl::StatusOr<TransformerArgs> back =
      TransformerArgsFromJson(TransformerArgsToJson(args), TransformerArgs{}, "test");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SameArchitecture(*back, args)) << DescribeArchitecture(*back);
  EXPECT_EQ(back->rope.beta_fast, 16);
}

TEST(TransformerArgsTest, ReadsOlderLlamaCheckpointKeys) {
  // What titan checkpoints recorded before the shared decoder (Llama 3.1 8B).
  const nlohmann::json old = {{"dim", 4096},          {"n_layers", 32},
                              {"n_heads", 32},        {"n_kv_heads", 8},
                              {"vocab_size", 128256}, {"multiple_of", 1024},
                              {"ffn_dim_multiplier", 1.3}, {"rope_theta", 500000.0},
                              {"rope_scaling", {{"factor", 8.0}, {"low_freq_factor", 1.0},
                                                {"high_freq_factor", 4.0},
                                                {"original_max_position_embeddings", 8192}}}};
  absl::StatusOr<TransformerArgs> args = TransformerArgsFromJson(old, TransformerArgs{}, "old");
  ASSERT_TRUE(args.ok()) << args.status();
  EXPECT_EQ(args->ffn_hidden_dim, 14336);
  EXPECT_EQ(args->head_size(), 128);
  EXPECT_EQ(args->rope.scaling, RopeScalingType::kLlama3);
  EXPECT_EQ(args->rope.factor, 8.0);
  EXPECT_EQ(args->rope.theta, 500000.0);
}

TEST(TransformerArgsTest, RejectsInconsistentShapesWithOneLine) {
  nlohmann::json bad = TransformerArgsToJson(TransformerArgs{});
  bad["n_kv_heads"] = 5;  // 32 heads are not a multiple of 5
  absl::StatusOr<TransformerArgs> args = TransformerArgsFromJson(bad, TransformerArgs{}, "x.json");
  ASSERT_FALSE(args.ok());
  EXPECT_NE(args.status().message().find("x.json: inconsistent model args"), std::string::npos);
  // The fuzzer's finding (fuzz/corpus/hf_config/crash-zero_heads.json): no heads divided by zero.
  bad["n_heads"] = 0;
  bad.erase("head_dim");
  args = TransformerArgsFromJson(bad, TransformerArgs{}, "x.json");
  ASSERT_FALSE(args.ok());
  EXPECT_NE(args.status().message().find("0/5 heads of 0"), std::string::npos);
}

// YaRN now computes whatever the factor: one <= 0 (infinite or negative frequencies) is refused.
TEST(TransformerArgsTest, RejectsARopeFactorThatIsNotPositive) {
  nlohmann::json args = TransformerArgsToJson(TransformerArgs{});
  args["rope"]["scaling"] = "yarn";
  for (double factor : {0.0, -2.0}) {
    args["rope"]["factor"] = factor;
    EXPECT_EQ(TransformerArgsFromJson(args, TransformerArgs{}, "x.json").status().message(),
              absl::StrCat("x.json: rope factor ", factor, ", expected a positive number"));
  }
  args["rope"]["factor"] = 0.5;
  EXPECT_TRUE(TransformerArgsFromJson(args, TransformerArgs{}, "x.json").ok());
}

// YaRN's cos/sin factor as transformers sets it: attention_factor when given, else from factor
// (and mscale over mscale_all_dim when both are given); the same factor is the same model.
TEST(TransformerArgsTest, YarnAttentionFactorIsTransformersDefaultWhenUnset) {
  TransformerArgs unset;
  unset.rope.scaling = RopeScalingType::kYarn;
  unset.rope.factor = 4;
  unset.rope.attention_factor = 0;
  EXPECT_DOUBLE_EQ(YarnAttentionFactor(unset.rope), 0.1 * std::log(4.0) + 1);
  TransformerArgs set = unset;
  set.rope.attention_factor = 0.1 * std::log(4.0) + 1;
  EXPECT_TRUE(SameArchitecture(unset, set));
  set.rope.attention_factor = 1;
  EXPECT_FALSE(SameArchitecture(unset, set));
  unset.rope.mscale = 1;
  unset.rope.mscale_all_dim = 1;
  EXPECT_EQ(YarnAttentionFactor(unset.rope), 1);
  EXPECT_TRUE(SameArchitecture(unset, set));
  unset.rope.mscale = 2;
  EXPECT_DOUBLE_EQ(YarnAttentionFactor(unset.rope),
                   (0.2 * std::log(4.0) + 1) / (0.1 * std::log(4.0) + 1));
  // transformers tests mscale and mscale_all_dim for truth: a negative one counts.
  unset.rope.mscale = -1;
  EXPECT_DOUBLE_EQ(YarnAttentionFactor(unset.rope),
                   (-0.1 * std::log(4.0) + 1) / (0.1 * std::log(4.0) + 1));
}

}  // namespace
}  // namespace titan
