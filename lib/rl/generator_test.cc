#include "lib/rl/generator.h"

#include "gtest/gtest.h"
#include "lib/model/autocast.h"

namespace titan {
namespace {

// Under bf16 autocast (titan_rl's mixed precision on GPUs; the CPU's autocast here) generation
// runs on fp32 weights: every row gets its tokens, each with a finite log-probability.
TEST(GenerateTest, RunsUnderBf16Autocast) {
  TransformerArgs args;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 16;
  args.ffn_hidden_dim = 64;
  args.max_seq_len = 16;
  at::manual_seed(0);
  Decoder model(args, at::TensorOptions().dtype(at::kFloat));
  model.Materialize(at::TensorOptions().dtype(at::kFloat));
  model.InitWeights();
  DataParallel data_parallel;
  SamplingOptions options;
  options.max_new_tokens = 4;
  options.temperature = 0;
  const AutocastScope autocast(at::kCPU, at::kBFloat16);
  absl::StatusOr<Generation> out = Generate(model, data_parallel, {{1, 2, 3}, {4, 5}}, options);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->responses.size(), 2u);
  EXPECT_EQ(out->responses[0].size(), 4u);
  EXPECT_TRUE(out->logprobs.isfinite().all().item<bool>());
}

}  // namespace
}  // namespace titan
