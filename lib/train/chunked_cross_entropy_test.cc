#include "lib/train/chunked_cross_entropy.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>

#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/autocast.h"
#include "lib/train/loss.h"

namespace titan {
namespace {

struct Result {
  at::Tensor loss, grad_hidden, grad_weight;
};

// Both paths backpropagate the loss divided by a token count, as the trainer does.
constexpr double kDivisor = 7.0;

// The plain path: full logits, then cross-entropy summed over counted labels.
Result Reference(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels) {
  at::Tensor h = hidden.detach().requires_grad_(true);
  at::Tensor w = weight.detach().requires_grad_(true);
  at::Tensor loss = at::cross_entropy_loss(at::linear(h, w).to(at::kFloat), labels, {},
                                           at::Reduction::Sum, kIgnoreIndex);
  (loss / kDivisor).backward();
  return {loss.detach(), h.grad(), w.grad()};
}

Result Chunked(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
               int64_t chunk, const VocabShard* shard = nullptr) {
  at::Tensor h = hidden.detach().requires_grad_(true);
  at::Tensor w = weight.detach().requires_grad_(true);
  at::Tensor loss = ChunkedLinearCrossEntropySum(h, w, labels, chunk, shard);
  (loss / kDivisor).backward();
  return {loss.detach(), h.grad(), w.grad()};
}

double RelativeDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() /
         a.to(at::kDouble).abs().max().item<double>();
}

// Rows and dims: at least as many tokens as dims computes the gradients in the forward, fewer
// recomputes the logits in backward; every test runs both.
class ChunkedCrossEntropyTest : public testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(ChunkedCrossEntropyTest, EqualsFullLogitsCrossEntropyWithIgnoredLabels) {
  const auto [rows, dim] = GetParam();
  at::manual_seed(0);
  const at::Tensor hidden = at::randn({rows, dim});
  const at::Tensor weight = at::randn({101, dim}) * 0.3;
  at::Tensor labels = at::randint(101, {rows}, at::kLong);
  labels.slice(0, 5, 12).fill_(kIgnoreIndex);
  const Result want = Reference(hidden, weight, labels);
  for (int64_t chunk : {int64_t{1}, int64_t{8}, rows, rows + 27}) {  // uneven, whole, larger
    const Result got = Chunked(hidden, weight, labels, chunk);
    // fp32; the same math summed in chunks instead of one pass: 1e-6 relative.
    EXPECT_LT(RelativeDiff(want.loss, got.loss), 1e-6) << chunk;
    EXPECT_LT(RelativeDiff(want.grad_hidden, got.grad_hidden), 1e-6) << chunk;
    EXPECT_LT(RelativeDiff(want.grad_weight, got.grad_weight), 1e-6) << chunk;
  }
  // Ignored rows get no gradient.
  EXPECT_EQ(
      Chunked(hidden, weight, labels, 8).grad_hidden.slice(0, 5, 12).abs().max().item<float>(),
      0.0f);
}

// Without a backward to follow (validation), nothing but the loss.
TEST_P(ChunkedCrossEntropyTest, ForwardWithoutGradientsGivesTheLoss) {
  const auto [rows, dim] = GetParam();
  at::manual_seed(4);
  const at::Tensor hidden = at::randn({rows, dim});
  const at::Tensor weight = at::randn({50, dim}) * 0.3;
  const at::Tensor labels = at::randint(50, {rows}, at::kLong);
  const at::Tensor want = at::cross_entropy_loss(at::linear(hidden, weight), labels, {},
                                                 at::Reduction::Sum, kIgnoreIndex);
  c10::NoGradGuard no_grad;
  const at::Tensor got =
      ChunkedLinearCrossEntropySum(hidden.requires_grad_(true), weight, labels, 7);
  EXPECT_FALSE(got.requires_grad());
  EXPECT_LT(RelativeDiff(want, got), 1e-6);
}

TEST_P(ChunkedCrossEntropyTest, FollowsTheForwardsAutocastInBackward) {
  const auto [rows, dim] = GetParam();
  at::manual_seed(1);
  const at::Tensor hidden = at::randn({rows, dim});
  const at::Tensor weight = at::randn({50, dim}) * 0.2;
  const at::Tensor labels = at::randint(50, {rows}, at::kLong);
  Result want, got;
  {
    AutocastScope bf16(at::kCPU, at::kBFloat16);
    want = Reference(hidden, weight, labels);
    got = Chunked(hidden, weight, labels, 5);
  }
  // Both run the matmuls in bf16 (an fp32 backward would differ by ~1e-2): the chunked sums
  // differ from the one-pass ones by a few bf16 roundings.
  EXPECT_LT(RelativeDiff(want.loss, got.loss), 1e-5);
  EXPECT_LT(RelativeDiff(want.grad_hidden, got.grad_hidden), 2e-2);
  EXPECT_LT(RelativeDiff(want.grad_weight, got.grad_weight), 2e-2);
  EXPECT_EQ(got.grad_hidden.scalar_type(), at::kFloat);
}

// An in-place all-reduce among `ranks` threads that call it in the same order: stands in for
// the tensor-parallel group.
class ThreadAllReduce {
 public:
  explicit ThreadAllReduce(int ranks) : ranks_(ranks) {}
  void Run(at::Tensor& t, bool max) {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t generation = generation_;
    partial_ = arrived_ == 0 ? t.clone() : (max ? at::maximum(partial_, t) : partial_ + t);
    if (++arrived_ == ranks_) {
      arrived_ = 0;
      ++generation_;
      result_ = partial_;
      done_.notify_all();
    } else {
      done_.wait(lock, [&] { return generation_ != generation; });
    }
    t.copy_(result_);
  }

 private:
  const int ranks_;
  std::mutex mu_;
  std::condition_variable done_;
  int arrived_ = 0;
  int64_t generation_ = 0;
  at::Tensor partial_, result_;
};

TEST_P(ChunkedCrossEntropyTest, VocabularyShardsAddUpToTheWholeVocabulary) {
  const auto [rows, dim] = GetParam();
  at::manual_seed(2);
  constexpr int kRanks = 2;
  const at::Tensor hidden = at::randn({rows, dim});
  const at::Tensor weight = at::randn({60, dim}) * 0.3;
  at::Tensor labels = at::randint(60, {rows}, at::kLong);
  labels.slice(0, 3, 7).fill_(kIgnoreIndex);
  const Result want = Reference(hidden, weight, labels);
  ThreadAllReduce group(kRanks);
  std::vector<Result> got(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      VocabShard shard;
      shard.first_id = r * 30;
      shard.all_reduce_max = [&](at::Tensor& t) { group.Run(t, /*max=*/true); };
      shard.all_reduce_sum = [&](at::Tensor& t) { group.Run(t, /*max=*/false); };
      got[r] = Chunked(hidden, weight.slice(0, r * 30, r * 30 + 30), labels, 8, &shard);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  // Every rank has the whole loss; each its rows of the weight's gradient, and a partial
  // gradient of hidden that the ranks sum. fp32, sums regrouped: 1e-6 relative.
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_LT(RelativeDiff(want.loss, got[r].loss), 1e-6) << r;
    EXPECT_LT(RelativeDiff(want.grad_weight.slice(0, r * 30, r * 30 + 30), got[r].grad_weight),
              1e-6)
        << r;
  }
  EXPECT_LT(RelativeDiff(want.grad_hidden, got[0].grad_hidden + got[1].grad_hidden), 1e-6);
}

// Zero-bubble pipelines take hidden's gradient and the weight's in two passes over one graph.
TEST_P(ChunkedCrossEntropyTest, SeparateGradientPassesEqualOneBackward) {
  const auto [rows, dim] = GetParam();
  at::manual_seed(3);
  const at::Tensor hidden = at::randn({rows, dim}).requires_grad_(true);
  const at::Tensor weight = (at::randn({20, dim}) * 0.3).requires_grad_(true);
  const at::Tensor labels = at::randint(20, {rows}, at::kLong);
  const Result want = Reference(hidden, weight, labels);
  const at::Tensor loss = ChunkedLinearCrossEntropySum(hidden, weight, labels, 5) / kDivisor;
  const at::Tensor grad_hidden =
      torch::autograd::grad({loss}, {hidden}, {}, /*retain_graph=*/true)[0];
  const at::Tensor grad_weight = torch::autograd::grad({loss}, {weight})[0];
  EXPECT_LT(RelativeDiff(want.grad_hidden, grad_hidden), 1e-6);
  EXPECT_LT(RelativeDiff(want.grad_weight, grad_weight), 1e-6);
}

// Per token, at a logit scale (RL's 1 / temperature), with a gradient per token: each token's
// lse - label logit, its entropy and the gradients equal log_softmax over the full logits'.
TEST(ChunkedCrossEntropyPerTokenTest, EqualsFullLogitsPerTokenWithEntropy) {
  at::manual_seed(0);
  const int64_t rows = 37, dim = 16;
  const double scale = 1.0 / 0.7;
  const at::Tensor hidden = at::randn({rows, dim});
  const at::Tensor weight = at::randn({101, dim}) * 0.3;
  at::Tensor labels = at::randint(101, {rows}, at::kLong);
  labels.slice(0, 5, 12).fill_(kIgnoreIndex);
  const at::Tensor counted = labels.ne(kIgnoreIndex);
  const at::Tensor token_weight = at::randn({rows});  // e.g. advantages
  at::Tensor h = hidden.detach().requires_grad_(true);
  at::Tensor w = weight.detach().requires_grad_(true);
  const at::Tensor logp = at::log_softmax(at::linear(h, w) * scale, -1);
  const at::Tensor want = -logp.gather(1, labels.clamp_min(0).unsqueeze(1)).squeeze(1) * counted;
  const at::Tensor want_entropy = -(logp.exp() * logp).sum(1).detach();
  (want * token_weight).sum().backward();
  for (int64_t chunk : {int64_t{1}, int64_t{8}, rows + 3}) {
    at::Tensor hc = hidden.detach().requires_grad_(true);
    at::Tensor wc = weight.detach().requires_grad_(true);
    at::Tensor entropy;
    const at::Tensor got =
        ChunkedLinearCrossEntropyPerToken(hc, wc, labels, scale, chunk, &entropy);
    (got * token_weight).sum().backward();
    // fp32, the same math in chunks: 1e-6 relative.
    EXPECT_LT(RelativeDiff(want.detach(), got.detach()), 1e-6) << chunk;
    EXPECT_LT(RelativeDiff(want_entropy, entropy), 1e-6) << chunk;
    EXPECT_LT(RelativeDiff(h.grad(), hc.grad()), 1e-6) << chunk;
    EXPECT_LT(RelativeDiff(w.grad(), wc.grad()), 1e-6) << chunk;
    EXPECT_EQ(got.slice(0, 5, 12).abs().max().item<float>(), 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(GradientsInForwardOrRecomputed, ChunkedCrossEntropyTest,
                         testing::Values(std::make_pair(int64_t{37}, int64_t{16}),
                                         std::make_pair(int64_t{29}, int64_t{40})));

}  // namespace
}  // namespace titan
