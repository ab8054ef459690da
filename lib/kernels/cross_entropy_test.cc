// The fused cross-entropy's math (the CPU loop over cross_entropy_math.h) against ATen's
// cross_entropy_loss on fp32 logits, as titan's loss called it: the loss within 1e-6 relative
// (fp32 sums in another order), the gradient within 1e-6 of its largest entry in fp32 and within
// one rounding of the logits' dtype (2^-7 relative in bf16) otherwise. cuda_kernels_test holds the
// CUDA kernels to the same.
#include "lib/kernels/cross_entropy.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using testing::HasSubstr;

class FusedCrossEntropyTest : public testing::TestWithParam<std::tuple<at::ScalarType, int64_t>> {};

TEST_P(FusedCrossEntropyTest, MatchesAtenLossAndGradient) {
  const auto [dtype, vocab] = GetParam();
  at::manual_seed(0);
  const int64_t rows = 37;
  const at::Tensor logits = (at::randn({rows, vocab}) * 3).to(dtype);
  at::Tensor labels = at::randint(vocab, {rows}, at::kLong);
  labels.index_put_({at::arange(0, rows, 5)}, -100);  // ignored rows
  const at::Tensor mine = logits.clone().requires_grad_();
  const at::Tensor ref = logits.clone().requires_grad_();
  const at::Tensor loss = FusedCrossEntropySum(mine, labels, -100);
  const at::Tensor want =
      at::cross_entropy_loss(ref.to(at::kFloat), labels, {}, at::Reduction::Sum, -100, 0.0);
  EXPECT_NEAR(loss.item<double>(), want.item<double>(), 1e-6 * want.item<double>());
  (loss * 0.5).backward();
  (want * 0.5).backward();
  ASSERT_EQ(mine.grad().scalar_type(), dtype);
  const at::Tensor got = mine.grad().to(at::kDouble);
  const at::Tensor expected = ref.grad().to(at::kDouble);
  if (dtype == at::kFloat) {
    EXPECT_LE((got - expected).abs().max().item<double>(),
              1e-6 * expected.abs().max().item<double>());
  } else {
    EXPECT_TRUE(((got - expected).abs() <= expected.abs() * 0x1p-7).all().item<bool>());
  }
  // Ignored rows have no gradient.
  EXPECT_EQ(got[0].abs().max().item<double>(), 0.0);
  EXPECT_GT(got[1].abs().max().item<double>(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndVocabularies, FusedCrossEntropyTest,
                         testing::Combine(testing::Values(at::kFloat, at::kBFloat16),
                                          testing::Values(int64_t{1000}, int64_t{1001})));

TEST(FusedCrossEntropyErrorTest, LabelOutsideTheVocabularyGivesNan) {
  const at::Tensor logits = at::randn({2, 8});
  EXPECT_TRUE(
      std::isnan(FusedCrossEntropySum(logits, at::tensor({1, 8}, at::kLong), -100).item<float>()));
}

TEST(FusedCrossEntropyErrorTest, RefusesLabelsOfAnotherShapeOrType) {
  const at::Tensor logits = at::randn({2, 8});
  EXPECT_THAT(std::string(FusedCrossEntropySupports(logits, at::zeros({2}, at::kInt)).message()),
              HasSubstr("labels: expected contiguous int64 [2]"));
  EXPECT_THAT(
      std::string(FusedCrossEntropySupports(logits.t(), at::zeros({8}, at::kLong)).message()),
      HasSubstr("logits: expected a contiguous [N, V] tensor"));
}

}  // namespace
}  // namespace titan
