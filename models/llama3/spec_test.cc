#include "models/llama3/spec.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

const ModelSpec& Spec() { return **FindModel("llama3"); }

std::unique_ptr<Decoder> OnMeta(const std::string& flavor) {
  return Spec().Build(Spec().Flavor(flavor).value(), at::TensorOptions().device(at::kMeta));
}

TransformerArgs TinyArgs() {
  TransformerArgs args = Spec().Flavor("debugmodel").value();
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 97;
  args.max_seq_len = 32;
  return args;
}

// Published parameter counts of Meta's Llama 3.1 / 3.2 releases (HF model cards' safetensors totals).
TEST(Llama3SpecTest, MetaConstructionGivesExactParameterCounts) {
  const std::pair<const char*, int64_t> expected[] = {
      {"1B", 1235814400LL}, {"3B", 3212749824LL}, {"8B", 8030261248LL},
      {"70B", 70553706496LL}, {"405B", 405853388800LL}};
  for (const auto& [flavor, count] : expected) EXPECT_EQ(OnMeta(flavor)->NumParameters(), count) << flavor;
}

TEST(Llama3SpecTest, Building405BOnMetaAllocatesNoParameterMemory) {
  const int64_t before = ResidentBytes();
  std::unique_ptr<Decoder> model = OnMeta("405B");
  const int64_t growth = ResidentBytes() - before;
  std::cout << "llama3 405B on meta: " << model->NumParameters() << " parameters, RSS growth "
            << growth / 1024 << " KiB\n";
  EXPECT_EQ(model->NumParameters(), 405853388800LL);
  // 405B fp32 parameters would be 1.6 TB; bookkeeping for ~1.1k tensors is well under 64 MiB.
  EXPECT_LT(growth, 64LL << 20);
}

TEST(Llama3SpecTest, ParameterNamesFollowTorchtitan) {
  Decoder model(TinyArgs(), at::TensorOptions().device(at::kMeta));
  std::vector<std::string> names;
  for (const ParamRef& p : model.NamedParameters()) names.push_back(p.name);
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.1.attention.wq.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.0.feed_forward.w2.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.0.attention_norm.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "output.weight"), names.end());
  EXPECT_EQ(names.size(), 3u + 2 * 9);
}

TEST(Llama3SpecTest, ForwardIsCausalAndBackwardReachesEveryParameter) {
  at::manual_seed(0);
  Decoder model(TinyArgs(), at::TensorOptions().device(at::kMeta));
  model.Materialize(at::TensorOptions().dtype(at::kFloat));
  model.InitWeights();
  at::Tensor tokens = at::randint(0, 97, {2, 10}, at::kLong);
  at::Tensor logits = model.Forward(tokens);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10, 97}));

  at::Tensor changed = tokens.clone();
  changed.select(1, 9).fill_(3);
  changed.select(1, 8).fill_(5);
  at::Tensor logits2 = model.Forward(changed);
  EXPECT_TRUE(at::allclose(logits.slice(1, 0, 8), logits2.slice(1, 0, 8), 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(logits.slice(1, 8), logits2.slice(1, 8), 1e-5, 1e-6));

  at::Tensor loss = at::cross_entropy_loss(logits.view({-1, 97}), tokens.view({-1}));
  loss.backward();
  for (const ParamRef& p : model.NamedParameters()) {
    ASSERT_TRUE(p.tensor->grad().defined()) << p.name;
    EXPECT_GT(p.tensor->grad().abs().sum().item<float>(), 0.0f) << p.name;
  }
  // An untrained model predicts near-uniformly: loss close to ln(vocab).
  EXPECT_NEAR(loss.item<float>(), std::log(97.0), 1.0);
}

TEST(Llama3SpecTest, InitFollowsTorchtitanScales) {
  at::manual_seed(0);
  TransformerArgs args = TinyArgs();
  args.dim = 256;
  args.n_heads = 8;
  Decoder model(args, at::TensorOptions().device(at::kMeta));
  model.Materialize(at::TensorOptions().dtype(at::kFloat));
  model.InitWeights();
  for (const ParamRef& p : model.NamedParameters()) {
    const double std = p.tensor->std().item<double>();
    if (p.name == "tok_embeddings.weight") {
      EXPECT_NEAR(std, 1.0, 0.02);
    }
    if (p.name == "layers.0.attention.wq.weight") {
      EXPECT_NEAR(std, 0.02, 0.002);
    }
    // Depth-scaled output projection: 0.02 / sqrt(2 * (layer + 1)).
    if (p.name == "layers.1.attention.wo.weight") {
      EXPECT_NEAR(std, 0.02 / 2.0, 0.001);
    }
    if (p.name == "norm.weight") {
      EXPECT_EQ(p.tensor->min().item<float>(), 1.0f);
    }
  }
}

TEST(Llama3SpecTest, TiedEmbeddingsHaveNoOutputWeight) {
  for (const ParamRef& p : OnMeta("1B")->NamedParameters()) EXPECT_NE(p.name, "output.weight");
}

TEST(Llama3SpecTest, FlavorsRoundTripThroughMatchingAndUnknownOnesListKnownOnes) {
  for (const std::string& flavor : Spec().FlavorNames()) {
    EXPECT_EQ(Spec().MatchFlavor(Spec().Flavor(flavor).value()), flavor);
  }
  auto args = Spec().Flavor("7B");
  ASSERT_FALSE(args.ok());
  EXPECT_NE(args.status().message().find("405B"), std::string::npos);
}

TEST(Llama3SpecTest, MetaParamsKeepMetasFfnDescription) {
  const nlohmann::json params = Spec().meta->params(Spec().Flavor("8B").value()).value();
  EXPECT_EQ(params.at("multiple_of"), 1024);
  EXPECT_EQ(params.at("ffn_dim_multiplier"), 1.3);
  EXPECT_EQ(params.at("use_scaled_rope"), true);
  absl::StatusOr<ModelInfo> info = Spec().meta->describe(Spec(), params, "params.json");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->flavor, "8B");
  EXPECT_EQ(info->bos_token_id, 128000);
}

// torchtitan's debugmodel keeps TransformerModelArgs' default RoPEScalingArgs: Llama 3.1's; so
// its params.json says use_scaled_rope and reads back as the same flavor.
TEST(Llama3SpecTest, DebugModelHasTorchtitansRopeScaling) {
  TransformerArgs args = Spec().Flavor("debugmodel").value();
  EXPECT_EQ(args.rope.scaling, RopeScalingType::kLlama3);
  EXPECT_EQ(args.rope.factor, 8);
  EXPECT_EQ(args.rope.low_freq_factor, 1);
  EXPECT_EQ(args.rope.high_freq_factor, 4);
  EXPECT_EQ(args.rope.original_max_position_embeddings, 8192);
  args.vocab_size = 2048;  // torchtitan's
  absl::StatusOr<nlohmann::json> params = Spec().meta->params(args);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(params->at("use_scaled_rope"), true);
  absl::StatusOr<ModelInfo> info = Spec().meta->describe(Spec(), *params, "params.json");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->flavor, "debugmodel");
  EXPECT_TRUE(SameArchitecture(info->args, args));
}

// params.json says only use_scaled_rope; Meta's code fixes the rest (3.2's 1B and 3B: factor 32).
TEST(Llama3SpecTest, MetaParamsRefuseScalingParamsJsonCannotExpress) {
  for (const char* flavor : {"1B", "8B"}) {
    const TransformerArgs args = Spec().Flavor(flavor).value();
    absl::StatusOr<nlohmann::json> params = Spec().meta->params(args);
    ASSERT_TRUE(params.ok()) << params.status();
    absl::StatusOr<ModelInfo> info = Spec().meta->describe(Spec(), *params, "params.json");
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->flavor, flavor);
    EXPECT_EQ(info->args.rope.factor, args.rope.factor);
  }
  TransformerArgs args = Spec().Flavor("8B").value();
  args.rope.original_max_position_embeddings = 64;
  EXPECT_EQ(Spec().meta->params(args).status().message(),
            "Meta's params.json cannot express llama3 RoPE scaling factor 8, low_freq_factor 1, "
            "high_freq_factor 4, original_max_position_embeddings 64: its use_scaled_rope true "
            "means llama3 RoPE scaling factor 8, low_freq_factor 1, high_freq_factor 4, "
            "original_max_position_embeddings 8192 for this shape");
  args = Spec().Flavor("debugmodel").value();
  args.rope.scaling = RopeScalingType::kLlama3;
  args.rope.factor = 32;
  EXPECT_THAT(std::string(Spec().meta->params(args).status().message()),
              ::testing::HasSubstr("cannot express llama3 RoPE scaling factor 32, "));
  args.rope.scaling = RopeScalingType::kYarn;
  EXPECT_THAT(std::string(Spec().meta->params(args).status().message()),
              ::testing::HasSubstr("cannot express yarn RoPE scaling: its use_scaled_rope true"));
  args.rope.scaling = RopeScalingType::kNone;
  EXPECT_TRUE(Spec().meta->params(args).ok());
}

// Meta's code takes dim / n_heads as the head size, so an export of another would not read back.
TEST(Llama3SpecTest, MetaParamsRefuseAHeadDimParamsJsonCannotExpress) {
  TransformerArgs args = TinyArgs();
  args.head_dim = 32;
  EXPECT_EQ(Spec().meta->params(args).status().message(),
            "Meta's params.json cannot express head_dim 32: it has no head_dim key and Meta's "
            "code uses dim / n_heads = 64 / 4");
  args.head_dim = 16;  // dim / n_heads written explicitly
  EXPECT_TRUE(Spec().meta->params(args).ok());
}

TEST(Llama3SpecTest, MfuCountsTheTiedHeadsMatmul) {
  // Llama 3.2 1B shares its 128256 x 2048 table with the head; the head's matmul still runs.
  const TransformerArgs tied = Spec().Flavor("1B").value();
  TransformerArgs untied = tied;
  untied.tie_word_embeddings = false;
  EXPECT_EQ(Spec().flops_per_token(tied, 2048), Spec().flops_per_token(untied, 2048));
}

}  // namespace
}  // namespace titan
