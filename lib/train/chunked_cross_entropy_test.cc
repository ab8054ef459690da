#include "lib/train/chunked_cross_entropy.h"

#include "gtest/gtest.h"
#include "lib/model/autocast.h"
#include "lib/train/loss.h"

namespace titan {
namespace {

struct Result {
  at::Tensor loss, grad_hidden, grad_weight;
};

// The plain path: full logits, then cross-entropy summed over counted labels.
Result Reference(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels) {
  at::Tensor h = hidden.detach().requires_grad_(true);
  at::Tensor w = weight.detach().requires_grad_(true);
  at::Tensor loss = at::cross_entropy_loss(at::linear(h, w).to(at::kFloat), labels, {},
                                           at::Reduction::Sum, kIgnoreIndex);
  loss.backward();
  return {loss.detach(), h.grad(), w.grad()};
}

Result Chunked(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
               int64_t chunk) {
  at::Tensor h = hidden.detach().requires_grad_(true);
  at::Tensor w = weight.detach().requires_grad_(true);
  at::Tensor loss = ChunkedLinearCrossEntropySum(h, w, labels, chunk);
  loss.backward();
  return {loss.detach(), h.grad(), w.grad()};
}

double RelativeDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>() /
         a.to(at::kDouble).abs().max().item<double>();
}

TEST(ChunkedCrossEntropyTest, EqualsFullLogitsCrossEntropyWithIgnoredLabels) {
  at::manual_seed(0);
  const at::Tensor hidden = at::randn({37, 16});
  const at::Tensor weight = at::randn({101, 16}) * 0.3;
  at::Tensor labels = at::randint(101, {37}, at::kLong);
  labels.slice(0, 5, 12).fill_(kIgnoreIndex);
  const Result want = Reference(hidden, weight, labels);
  for (int64_t chunk : {1, 8, 37, 64}) {  // uneven, whole, larger than the batch
    const Result got = Chunked(hidden, weight, labels, chunk);
    // fp32; the same math summed in chunks instead of one pass: 1e-6 relative.
    EXPECT_LT(RelativeDiff(want.loss, got.loss), 1e-6) << chunk;
    EXPECT_LT(RelativeDiff(want.grad_hidden, got.grad_hidden), 1e-6) << chunk;
    EXPECT_LT(RelativeDiff(want.grad_weight, got.grad_weight), 1e-6) << chunk;
  }
  // Ignored rows get no gradient.
  EXPECT_EQ(Chunked(hidden, weight, labels, 8).grad_hidden.slice(0, 5, 12).abs().max().item<float>(),
            0.0f);
}

TEST(ChunkedCrossEntropyTest, FollowsTheForwardsAutocastInBackward) {
  at::manual_seed(1);
  const at::Tensor hidden = at::randn({24, 32});
  const at::Tensor weight = at::randn({50, 32}) * 0.2;
  const at::Tensor labels = at::randint(50, {24}, at::kLong);
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

}  // namespace
}  // namespace titan
