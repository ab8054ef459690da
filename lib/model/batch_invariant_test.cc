#include "lib/model/batch_invariant.h"

#include <c10/core/GradMode.h>

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/attention.h"
#include "lib/model/decoder.h"
#include "lib/model/tiny_transformer_args.h"

namespace titan {
namespace {

// Turns the mode on for one test.
class BatchInvariantTest : public ::testing::Test {
 protected:
  void SetUp() override { SetBatchInvariant(true); }
  void TearDown() override { SetBatchInvariant(false); }
};

TEST_F(BatchInvariantTest, LinearRowsDoNotDependOnTheirNeighbours) {
  at::manual_seed(0);
  const at::Tensor w = at::randn({96, 64});
  const at::Tensor x = at::randn({3, 37, 64});
  const at::Tensor all = BatchInvariantLinear(x, w);
  for (int64_t t : {0, 5, 16, 36}) {
    EXPECT_TRUE(at::equal(BatchInvariantLinear(x[1].slice(0, t, t + 1), w)[0], all[1][t])) << t;
  }
  // The same product as ATen's (1e-5: another blocking of the same fp32 sums).
  EXPECT_LT((all - at::linear(x, w)).abs().max().item<double>(), 1e-5);
}

TEST_F(BatchInvariantTest, AttentionOfOneQueryEqualsItsRowOfTheFullCausalBlock) {
  at::manual_seed(1);
  const at::Tensor q = at::randn({2, 4, 45, 16});
  const at::Tensor k = at::randn({2, 2, 45, 16});
  const at::Tensor v = at::randn({2, 2, 45, 16});
  const at::Tensor full = BatchInvariantAttention(q, k, v, at::Tensor());
  for (int64_t t : {0, 17, 31, 32, 44}) {
    // Decoding query t sees the t + 1 keys cached so far.
    const at::Tensor one = BatchInvariantAttention(q.slice(2, t, t + 1), k.slice(2, 0, t + 1),
                                                   v.slice(2, 0, t + 1), at::Tensor());
    EXPECT_TRUE(at::equal(one.squeeze(2), full.select(2, t))) << t;
  }
  // SDPA's result within 1e-5 (the same softmax summed in another order).
  const at::Tensor reference =
      at::scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                       std::nullopt, 0.0, /*is_causal=*/true);
  EXPECT_LT((full - reference).abs().max().item<double>(), 1e-5);
}

TEST_F(BatchInvariantTest, Bfloat16AttentionMasksWithAFiniteBfloat16Score) {
  // bf16 scores, as under CUDA autocast: fp32's lowest value would overflow masked_fill.
  at::manual_seed(2);
  const at::Tensor q = at::randn({1, 2, 40, 16});
  const at::Tensor k = at::randn({1, 2, 40, 16});
  const at::Tensor v = at::randn({1, 2, 40, 16});
  const at::Tensor bf16 = BatchInvariantAttention(q.to(at::kBFloat16), k.to(at::kBFloat16),
                                                  v.to(at::kBFloat16), at::Tensor());
  const at::Tensor fp32 = BatchInvariantAttention(q, k, v, at::Tensor());
  ASSERT_EQ(bf16.scalar_type(), at::kBFloat16);
  // bf16 rounds scores, weights and outputs (2^-8 each); a mask lost would be off by O(1).
  EXPECT_LT((bf16.to(at::kFloat) - fp32).abs().max().item<double>(), 0.05);
}

TransformerArgs TinyArgs(bool qwen) { return TinyTransformerArgs(64, 101, 64, qwen); }

// Left-padded prompts decoded token by token, as the RL generator does, against one full forward
// of the finished sequences (the trainer's recomputation): the logits must agree bit for bit.
at::Tensor MaxDecodeDifference(bool qwen) {
  const TransformerArgs args = TinyArgs(qwen);
  at::manual_seed(2);
  Decoder model(args, at::kFloat);
  model.InitWeights();
  c10::NoGradGuard no_grad;
  const int64_t batch = 3, prompt = 7, total = 40;
  const at::Tensor tokens = at::randint(args.vocab_size, {batch, total}, at::kLong);
  at::Tensor valid = at::ones({batch, total}, at::kBool);
  valid[0].slice(0, 0, 4).fill_(false);  // a 3-token prompt, left-padded
  valid[2].slice(0, 0, 1).fill_(false);
  const at::Tensor positions = (valid.cumsum(1) - 1).clamp_min(0);
  KvCache cache(args.n_layers, batch, total, args.kv_heads(), args.head_size(), at::kFloat);
  DecoderInputs prefill{positions.slice(1, 0, prompt), valid.slice(1, 0, prompt), {}, &cache};
  std::vector<at::Tensor> pieces = {model.Forward(tokens.slice(1, 0, prompt), prefill)};
  for (int64_t t = prompt; t < total; ++t) {
    DecoderInputs step{positions.slice(1, t, t + 1), {}, {}, &cache};
    pieces.push_back(model.Forward(tokens.slice(1, t, t + 1), step));
  }
  const at::Tensor decoded = at::cat(pieces, 1);
  at::Tensor full;
  {
    c10::AutoGradMode grad(true);  // the trainer's forward, with autograd recording
    full = model.Forward(tokens, DecoderInputs{positions, valid, {}, nullptr}).detach();
  }
  // Real tokens only: padding rows see nothing and are never read.
  const at::Tensor mask = valid.unsqueeze(-1);
  return ((decoded - full).abs() * mask).max();
}

TEST_F(BatchInvariantTest, DecodingGivesTheBitsOfTheFullForward) {
  for (bool qwen : {false, true}) {
    EXPECT_EQ(MaxDecodeDifference(qwen).item<double>(), 0.0) << (qwen ? "qwen" : "llama");
  }
}

TEST(BatchInvariantOffTest, DefaultKernelsDifferInTheLastBits) {
  // Recorded, not asserted to be non-zero: the figure the mode removes.
  const double diff = MaxDecodeDifference(false).item<double>();
  RecordProperty("max_logit_difference_without_mode", std::to_string(diff));
  EXPECT_LT(diff, 1e-4);
}

}  // namespace
}  // namespace titan
