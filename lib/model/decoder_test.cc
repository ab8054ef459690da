#include "lib/model/decoder.h"

#include <c10/core/GradMode.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/tiny_transformer_args.h"

namespace titan {
namespace {

// A Llama-like tiny model (interleaved RoPE) and a Qwen3-like one (rotate-half, qk-norm, a head
// size independent of dim, tied embeddings).
TransformerArgs TinyArgs(bool qwen) {
  TransformerArgs args = TinyTransformerArgs(32, 61, 64, qwen, /*n_layers=*/3);
  if (qwen) {
    args.rope.theta = 1e6;
    args.norm_eps = 1e-6;
  }
  return args;
}

std::unique_ptr<Decoder> Build(const TransformerArgs& args, int seed = 0) {
  at::manual_seed(seed);
  auto model = std::make_unique<Decoder>(args, at::TensorOptions().dtype(at::kFloat));
  model->InitWeights();
  return model;
}

class DecoderTest : public ::testing::TestWithParam<bool> {};

TEST_P(DecoderTest, KvCacheDecodingMatchesFullForward) {
  const TransformerArgs args = TinyArgs(GetParam());
  auto model = Build(args);
  c10::NoGradGuard no_grad;
  at::Tensor tokens = at::randint(args.vocab_size, {2, 12}, at::kLong);
  at::Tensor full = model->Forward(tokens);
  // A 5-token prompt in one forward, then one token at a time.
  KvCache cache(args.n_layers, 2, 12, args.kv_heads(), args.head_size(), at::kFloat);
  DecoderInputs inputs;
  inputs.kv_cache = &cache;
  std::vector<at::Tensor> pieces = {model->Forward(tokens.slice(1, 0, 5), inputs)};
  for (int64_t t = 5; t < 12; ++t) pieces.push_back(model->Forward(tokens.slice(1, t, t + 1), inputs));
  EXPECT_EQ(cache.length(), 12);
  at::Tensor decoded = at::cat(pieces, 1);
  // The same math in another order (one query row at a time instead of a causal block): within
  // 1e-6 of the largest logit, about ten fp32 steps at that magnitude (the Qwen-like model's tied
  // head reaches 44, where one step is 3.8e-6; observed 1.1e-5 on an AMD EPYC).
  const double largest = full.abs().max().item<double>();
  EXPECT_LT((decoded - full).abs().max().item<double>(), 1e-6 * largest);
}

// A cache made for fp32 weights holds bf16 keys and values when the layers compute in bf16 (FSDP's
// bf16 gathered weights), so attention gets one dtype.
TEST(KvCacheTest, KeepsTheDtypeTheLayersComputeIn) {
  KvCache cache(/*num_layers=*/1, /*batch=*/1, /*max_len=*/4, /*kv_heads=*/2, /*head_dim=*/8,
                at::kFloat);
  const at::Tensor first = at::randn({1, 2, 3, 8}).to(at::kBFloat16);
  cache.Append(0, first, first * 2);
  cache.Commit(3);
  const at::Tensor next = at::randn({1, 2, 1, 8}).to(at::kBFloat16);
  const auto [keys, values] = cache.Append(0, next, next * 2);
  EXPECT_EQ(keys.scalar_type(), at::kBFloat16);
  EXPECT_EQ(values.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(keys, at::cat({first, next}, 2)));
  EXPECT_TRUE(at::equal(values, at::cat({first, next}, 2) * 2));
}

TEST_P(DecoderTest, LeftPaddedPromptsDecodeAsUnpaddedOnes) {
  const TransformerArgs args = TinyArgs(GetParam());
  auto model = Build(args, 1);
  c10::NoGradGuard no_grad;
  at::Tensor short_prompt = at::randint(args.vocab_size, {1, 3}, at::kLong);
  at::Tensor long_prompt = at::randint(args.vocab_size, {1, 6}, at::kLong);
  // Batch: the short prompt left-padded to 6 (pad id 0, invalid), positions from its first token.
  at::Tensor tokens = at::cat({at::cat({at::zeros({1, 3}, at::kLong), short_prompt}, 1), long_prompt});
  DecoderInputs inputs;
  inputs.valid = at::ones({2, 6}, at::kBool);
  inputs.valid.slice(1, 0, 3)[0].fill_(false);
  inputs.positions = at::stack({at::cat({at::zeros({3}), at::arange(3)}), at::arange(6)}).to(at::kLong);
  KvCache cache(args.n_layers, 2, 8, args.kv_heads(), args.head_size(), at::kFloat);
  inputs.kv_cache = &cache;
  at::Tensor batched = model->Forward(tokens, inputs);
  // One more token each, after the prompts.
  at::Tensor next = at::randint(args.vocab_size, {2, 1}, at::kLong);
  DecoderInputs step;
  step.kv_cache = &cache;
  step.positions = at::tensor({3, 6}, at::kLong).view({2, 1});
  at::Tensor batched_next = model->Forward(next, step);
  EXPECT_TRUE(at::isfinite(batched).all().item<bool>());  // padding rows stay finite
  at::Tensor alone_short = model->Forward(at::cat({short_prompt, next.slice(0, 0, 1)}, 1));
  at::Tensor alone_long = model->Forward(at::cat({long_prompt, next.slice(0, 1, 2)}, 1));
  EXPECT_LT((batched[0].slice(0, 3) - alone_short[0].slice(0, 0, 3)).abs().max().item<double>(),
            1e-5);
  EXPECT_LT((batched_next[0][0] - alone_short[0][3]).abs().max().item<double>(), 1e-5);
  EXPECT_LT((batched[1] - alone_long[0].slice(0, 0, 6)).abs().max().item<double>(), 1e-5);
  EXPECT_LT((batched_next[1][0] - alone_long[0][6]).abs().max().item<double>(), 1e-5);
}

TEST_P(DecoderTest, DocumentMaskingIsolatesPackedDocuments) {
  const TransformerArgs args = TinyArgs(GetParam());
  auto model = Build(args, 2);
  c10::NoGradGuard no_grad;
  at::Tensor tokens = at::randint(args.vocab_size, {1, 10}, at::kLong);
  DecoderInputs inputs;
  inputs.documents = at::tensor({0, 0, 0, 0, 1, 1, 1, 1, 1, 1}, at::kLong).view({1, 10});
  at::Tensor packed = model->Forward(tokens, inputs);
  // RoPE is relative, so the second document at positions 4.. equals it alone at 0..
  at::Tensor first = model->Forward(tokens.slice(1, 0, 4));
  at::Tensor second = model->Forward(tokens.slice(1, 4));
  EXPECT_LT((packed.slice(1, 0, 4) - first).abs().max().item<double>(), 1e-5);
  EXPECT_LT((packed.slice(1, 4) - second).abs().max().item<double>(), 1e-4);
  // Without the mask the second document sees the first.
  EXPECT_GT((model->Forward(tokens).slice(1, 4) - second).abs().max().item<double>(), 1e-3);
}

TEST_P(DecoderTest, StagePartsChainToTheWholeModel) {
  const TransformerArgs args = TinyArgs(GetParam());
  auto whole = Build(args, 3);
  DecoderPart first{0, 2, true, false};
  DecoderPart last{2, -1, false, true};
  Decoder stage0(args, at::kFloat, first);
  Decoder stage1(args, at::kFloat, last);
  // Copy by name: the parts name their parameters as the whole model does.
  std::map<std::string, at::Tensor> weights;
  for (const ParamRef& p : whole->NamedParameters()) weights[p.name] = *p.tensor;
  std::vector<std::string> names;
  for (Decoder* stage : {&stage0, &stage1}) {
    for (const ParamRef& p : stage->NamedParameters()) {
      ASSERT_TRUE(weights.count(p.name)) << p.name;
      *p.tensor = weights[p.name];
      names.push_back(p.name);
    }
  }
  EXPECT_EQ(stage1.layer_ids(), (std::vector<int64_t>{2}));
  EXPECT_EQ(names.front(), "tok_embeddings.weight");
  c10::NoGradGuard no_grad;
  at::Tensor tokens = at::randint(args.vocab_size, {2, 7}, at::kLong);
  at::Tensor hidden = stage0.RunLayers(stage0.Embed(tokens), stage0.PrepareBatch(2, 7, {}));
  at::Tensor logits = stage1.Head(stage1.RunLayers(hidden, stage1.PrepareBatch(2, 7, {})));
  EXPECT_TRUE(at::equal(logits, whole->Forward(tokens)));
}

INSTANTIATE_TEST_SUITE_P(LlamaAndQwen, DecoderTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "qwen" : "llama"; });

TEST(DecoderParamsTest, QkNormAndHeadDimShapeTheParameters) {
  Decoder model(TinyArgs(true), at::TensorOptions().device(at::kMeta));
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const ParamRef& p : model.NamedParameters()) shapes[p.name] = p.tensor->sizes().vec();
  EXPECT_EQ(shapes["layers.0.attention.wq.weight"], (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(shapes["layers.0.attention.wk.weight"], (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(shapes["layers.0.attention.q_norm.weight"], (std::vector<int64_t>{16}));
  EXPECT_EQ(shapes.count("output.weight"), 0u);  // tied
}

}  // namespace
}  // namespace titan
