#include "lib/rl/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <limits>
#include <memory>

#include "gtest/gtest.h"
#include "lib/model/autocast.h"

namespace titan {
namespace {

std::unique_ptr<Decoder> TinyModel(int64_t max_seq_len) {
  TransformerArgs args;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 16;
  args.ffn_hidden_dim = 64;
  args.max_seq_len = max_seq_len;
  at::manual_seed(0);
  auto model = std::make_unique<Decoder>(args, at::TensorOptions().dtype(at::kFloat));
  model->Materialize(at::TensorOptions().dtype(at::kFloat));
  model->InitWeights();
  return model;
}

// Under bf16 autocast (titan_rl's mixed precision on GPUs; the CPU's autocast here) generation
// runs on fp32 weights: every row gets its tokens, each with a finite log-probability.
TEST(GenerateTest, RunsUnderBf16Autocast) {
  std::unique_ptr<Decoder> model = TinyModel(16);
  DataParallel data_parallel;
  SamplingOptions options;
  options.max_new_tokens = 4;
  options.temperature = 0;
  const AutocastScope autocast(at::kCPU, at::kBFloat16);
  absl::StatusOr<Generation> out = Generate(*model, data_parallel, {{1, 2, 3}, {4, 5}}, options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->prompts, (std::vector<TokenIds>{{1, 2, 3}, {4, 5}}));
  ASSERT_EQ(out->responses.size(), 2u);
  EXPECT_EQ(out->responses[0].size(), 4u);
  EXPECT_TRUE(out->logprobs.isfinite().all().item<bool>());
}

// The host reads "every row stopped" and the job votes on it every 8 tokens, not after each one:
// 20 tokens vote after 8 and 16 (every rank ends at the 20th); a vote to stop at 8 ends there.
TEST(GenerateTest, StopIsVotedEveryEightTokens) {
  std::unique_ptr<Decoder> model = TinyModel(32);
  DataParallel data_parallel;
  SamplingOptions options;
  options.max_new_tokens = 20;
  int votes = 0;
  auto never = [&](bool) -> absl::StatusOr<bool> {
    ++votes;
    return false;
  };
  absl::StatusOr<Generation> full = Generate(*model, data_parallel, {{1, 2, 3}}, options, never);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(votes, 2);
  EXPECT_EQ(full->decode_steps, 19);
  ASSERT_EQ(full->responses[0].size(), 20u);
  auto at_once = [](bool) -> absl::StatusOr<bool> { return true; };
  absl::StatusOr<Generation> early = Generate(*model, data_parallel, {{1, 2, 3}}, options, at_once);
  ASSERT_TRUE(early.ok()) << early.status();
  EXPECT_EQ(early->decode_steps, 7);
  // The same seed draws the same first 8 tokens.
  EXPECT_EQ(early->responses[0],
            TokenIds(full->responses[0].begin(), full->responses[0].begin() + 8));
}

// Sampling follows softmax(logits / temperature): 4,000 rows with the same 4 logits draw each
// token at its probability (a binomial standard deviation is under 0.008; bound 0.03), and each
// draw's log-probability is log_softmax's.
TEST(SampleNextTest, DrawsTokensAtTheirProbabilities) {
  const at::Tensor row = at::tensor({2.0, 1.0, 0.0, -1.0}, at::kFloat);
  const at::Tensor logits = row.expand({4000, 4}).contiguous();
  SamplingOptions options;
  options.temperature = 0.7;
  at::Generator generator = SamplingGenerator(at::kCPU, 3);
  at::Tensor logprobs;
  const at::Tensor next = SampleNext(logits, options, generator, &logprobs);
  const at::Tensor expected = (row / 0.7).softmax(-1);
  const at::Tensor frequency = at::bincount(next, {}, 4).to(at::kFloat) / 4000;
  EXPECT_LT((frequency - expected).abs().max().item<double>(), 0.03);
  EXPECT_TRUE(at::allclose(logprobs, expected.log().index_select(0, next), 1e-5, 1e-6));
}

// top_k keeps the k likeliest tokens, top_p the fewest whose probability reaches p.
TEST(SampleNextTest, TopKAndTopPKeepOnlyTheirTokens) {
  at::manual_seed(0);
  const at::Tensor logits = at::randn({64, 32});
  const at::Tensor top3 = std::get<1>(logits.topk(3, -1));
  SamplingOptions options;
  options.top_k = 3;
  at::Generator generator = SamplingGenerator(at::kCPU, 1);
  at::Tensor logprobs;
  at::Tensor next = SampleNext(logits, options, generator, &logprobs);
  EXPECT_TRUE(top3.eq(next.unsqueeze(1)).any(1).all().item<bool>());
  options.top_k = 0;
  options.top_p = 1e-6;  // the first token alone reaches it
  next = SampleNext(logits, options, generator, &logprobs);
  EXPECT_TRUE(next.equal(logits.argmax(-1)));
}

// Each generation draws from its own seeded generator: the same seed gives the same tokens
// whatever the global generator did in between; another seed gives others.
TEST(SampleNextTest, SeededDrawsIgnoreTheGlobalGenerator) {
  const at::Tensor logits = at::zeros({16, 50});
  SamplingOptions options;
  at::Tensor logprobs;
  at::Generator first = SamplingGenerator(at::kCPU, 5);
  const at::Tensor a = SampleNext(logits, options, first, &logprobs);
  at::rand({100});
  at::Generator second = SamplingGenerator(at::kCPU, 5);
  EXPECT_TRUE(SampleNext(logits, options, second, &logprobs).equal(a));
  // On the CPU, as torch.Generator().manual_seed(5) draws (what titan_rl drew before).
  at::Generator fresh = at::make_generator<at::CPUGeneratorImpl>(5);
  EXPECT_TRUE(SampleNext(logits, options, fresh, &logprobs).equal(a));
  at::Generator other = SamplingGenerator(at::kCPU, 6);
  EXPECT_FALSE(SampleNext(logits, options, other, &logprobs).equal(a));
}

// A row drawing from its own generator gets the tokens it gets alone: the other rows' draws do
// not advance its generator.
TEST(SampleNextTest, PerRowDrawsDoNotDependOnTheOtherRows) {
  at::manual_seed(0);
  const at::Tensor logits = at::randn({3, 50});
  SamplingOptions options;
  std::vector<at::Generator> batch = {SamplingGenerator(at::kCPU, 1),
                                      SamplingGenerator(at::kCPU, 2),
                                      SamplingGenerator(at::kCPU, 3)};
  std::vector<at::Generator> alone = {SamplingGenerator(at::kCPU, 2)};
  at::Tensor logprobs, alone_logprobs;
  for (int step = 0; step < 5; ++step) {
    const at::Tensor next = SampleNextPerRow(logits, options, batch, &logprobs);
    const at::Tensor own = SampleNextPerRow(logits.slice(0, 1, 2), options, alone, &alone_logprobs);
    EXPECT_EQ(next[1].item<int64_t>(), own[0].item<int64_t>()) << "step " << step;
    EXPECT_EQ(logprobs[1].item<float>(), alone_logprobs[0].item<float>());
  }
}

// Generation with row seeds: a prompt's response is the same in a batch of other prompts as
// alone (its seed, not its place in the batch, decides its draws).
TEST(GenerateTest, RowSeedsMakeAPromptsSamplesItsOwn) {
  std::unique_ptr<Decoder> model = TinyModel(64);
  DataParallel data_parallel;
  SamplingOptions options;
  options.max_new_tokens = 12;
  options.pad_id = 0;
  const std::vector<TokenIds> prompts = {{1, 2, 3, 4, 5}, {6, 7}, {8, 9, 10}};
  options.row_seeds = {RowSeed(7, 0), RowSeed(7, 1), RowSeed(7, 2)};
  absl::StatusOr<Generation> all = Generate(*model, data_parallel, prompts, options);
  ASSERT_TRUE(all.ok()) << all.status();
  options.row_seeds = {RowSeed(7, 1)};
  absl::StatusOr<Generation> one = Generate(*model, data_parallel, {prompts[1]}, options);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->responses[0], all->responses[1]);
  EXPECT_NE(all->responses[0], all->responses[1]);  // other seeds draw other tokens
  options.row_seeds = {1, 2};
  EXPECT_EQ(Generate(*model, data_parallel, {prompts[1]}, options).status().message(),
            "2 row seeds for 1 prompts: give one per prompt");
}

// A diverged model (non-finite logits) fails generation with one clear error whether it samples
// greedily, from one generator or from one per row, instead of LibTorch's multinomial error (a
// device-side assert on CUDA) or, greedy, garbage tokens with NaN log-probabilities.
TEST(GenerateTest, NonFiniteLogitsFailEveryMode) {
  std::unique_ptr<Decoder> model = TinyModel(16);
  {
    c10::NoGradGuard no_grad;
    model->OutputWeight().select(0, 3).fill_(std::numeric_limits<float>::infinity());
  }
  DataParallel data_parallel;
  SamplingOptions greedy, sampled, per_row;
  for (SamplingOptions* options : {&greedy, &sampled, &per_row}) options->max_new_tokens = 4;
  greedy.temperature = 0;
  per_row.row_seeds = {1, 2};
  for (const SamplingOptions* options : {&greedy, &sampled, &per_row}) {
    absl::StatusOr<Generation> out = Generate(*model, data_parallel, {{1, 2, 3}, {4, 5}}, *options);
    EXPECT_TRUE(absl::IsAborted(out.status())) << out.status();
    EXPECT_EQ(out.status().message(),
              "the model's logits are not finite (NaN or infinite): its weights have diverged");
  }
}

}  // namespace
}  // namespace titan
