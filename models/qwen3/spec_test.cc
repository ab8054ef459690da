#include "models/qwen3/spec.h"

#include <cmath>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace titan {
namespace {

const ModelSpec& Spec() { return **FindModel("qwen3"); }

// Exact counts from Qwen's published config.json shapes (every tensor of the safetensors index,
// lm_head counted once when tied), checked against the model cards' rounded "Number of
// Parameters" and "(Non-Embedding)" figures.
TEST(Qwen3SpecTest, PublishedParameterCountsOnMeta) {
  struct Expected {
    const char* flavor;
    int64_t total;
    double card_total;          // billions, as the model card rounds it
    double card_non_embedding;  // billions
  };
  const Expected expected[] = {
      {"0.6B", 596049920LL, 0.6, 0.44},   {"1.7B", 1720574976LL, 1.7, 1.4},
      {"4B", 4022468096LL, 4.0, 3.6},     {"8B", 8190735360LL, 8.2, 6.95},
      {"14B", 14768307200LL, 14.8, 13.2}, {"32B", 32762123264LL, 32.8, 31.2}};
  for (const Expected& e : expected) {
    const TransformerArgs args = Spec().Flavor(e.flavor).value();
    std::unique_ptr<Decoder> model = Spec().Build(args, at::TensorOptions().device(at::kMeta));
    const int64_t total = model->NumParameters();
    EXPECT_EQ(total, e.total) << e.flavor;
    const int64_t embeddings = args.vocab_size * args.dim * (args.tie_word_embeddings ? 1 : 2);
    // The cards round to the digits they print.
    const double digits = e.card_non_embedding < 1 || e.card_non_embedding == 6.95 ? 100 : 10;
    EXPECT_EQ(std::round(total / 1e8) / 10, e.card_total) << e.flavor;
    EXPECT_EQ(std::round((total - embeddings) / 1e9 * digits) / digits, e.card_non_embedding)
        << e.flavor;
  }
}

TEST(Qwen3SpecTest, DebugModelIsTorchtitansQwen3Debugmodel) {
  const TransformerArgs args = Spec().Flavor("debugmodel").value();
  EXPECT_EQ(args.dim, 256);
  EXPECT_EQ(args.n_layers, 8);
  EXPECT_EQ(args.n_heads, 16);
  EXPECT_EQ(args.kv_heads(), 8);
  EXPECT_EQ(args.head_size(), 128);
  EXPECT_EQ(args.ffn_hidden_dim, 3072);
  EXPECT_TRUE(args.qk_norm);
  EXPECT_TRUE(args.tie_word_embeddings);
  EXPECT_EQ(args.rope.theta, 1e6);
}

TEST(Qwen3SpecTest, QkNormParametersAndTorchtitansInit) {
  at::manual_seed(0);
  TransformerArgs args = Spec().Flavor("debugmodel").value();
  args.vocab_size = 2048;
  args.n_layers = 2;
  std::unique_ptr<Decoder> model = Spec().Build(args, at::TensorOptions().device(at::kMeta));
  model->Materialize(at::TensorOptions().dtype(at::kFloat));
  model->InitWeights();
  std::map<std::string, at::Tensor> params;
  for (const ParamRef& p : model->NamedParameters()) params[p.name] = *p.tensor;
  EXPECT_EQ(params.at("layers.1.attention.q_norm.weight").sizes(), (std::vector<int64_t>{128}));
  EXPECT_EQ(params.at("layers.1.attention.k_norm.weight").min().item<float>(), 1.0f);
  EXPECT_EQ(params.count("output.weight"), 0u);
  // torchtitan's Qwen3 (its Llama's init): the tied table takes the head's init, std dim^-0.5
  // (1/16) truncated at ±3σ; wo, w2 and w3 are depth-scaled, 0.02 / sqrt(2·(layer+1)).
  const at::Tensor& table = params.at("tok_embeddings.weight");
  EXPECT_NEAR(table.std().item<double>(), 1.0 / 16 * 0.986, 0.001);  // a ±3σ cut's std
  EXPECT_LE(table.abs().max().item<double>(), 3.0 / 16);
  EXPECT_NEAR(params.at("layers.0.feed_forward.w2.weight").std().item<double>(),
              0.02 / std::sqrt(2.0), 0.0005);
  EXPECT_NEAR(params.at("layers.1.attention.wo.weight").std().item<double>(), 0.02 / 2, 0.0005);
  EXPECT_NEAR(params.at("layers.1.attention.wq.weight").std().item<double>(), 0.02, 0.0005);
}

}  // namespace
}  // namespace titan
