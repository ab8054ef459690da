// The fused cross-entropy's math (the CPU loop over cross_entropy_math.h) against ATen's
// cross_entropy_loss on fp32 logits, as titan's loss called it (tolerances in kernel_test_util.h;
// the loss within 1e-6 relative). cuda_kernels_test holds the CUDA kernels to the same.
#include "lib/kernels/cross_entropy.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/kernels/kernel_test_util.h"

namespace titan {
namespace {

using testing::HasSubstr;

class FusedCrossEntropyTest : public testing::TestWithParam<std::tuple<at::ScalarType, int64_t>> {};

TEST_P(FusedCrossEntropyTest, MatchesAtenLossAndGradient) {
  const auto [dtype, vocab] = GetParam();
  ExpectCrossEntropyMatchesAten(MakeCrossEntropyCase(37, vocab, dtype, at::kCPU), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndVocabularies, FusedCrossEntropyTest,
                         testing::Combine(testing::Values(at::kFloat, at::kBFloat16),
                                          testing::Values(int64_t{1000}, int64_t{1001})));

// A -inf first (masked logits) adds nothing; a NaN anywhere makes the loss NaN, as in ATen.
TEST(FusedCrossEntropyErrorTest, MaskedLogitsCountNothingAndNanPropagates) {
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor masked = at::tensor({-inf, 1.0f, 2.0f}).reshape({1, 3});
  const at::Tensor label = at::tensor({2}, at::kLong);
  EXPECT_NEAR(FusedCrossEntropySum(masked, label, -100).item<float>(),
              at::cross_entropy_loss(masked, label, {}, at::Reduction::Sum).item<float>(), 1e-6);
  const at::Tensor with_nan = at::tensor({-inf, NAN, 2.0f}).reshape({1, 3});
  EXPECT_TRUE(std::isnan(FusedCrossEntropySum(with_nan, label, -100).item<float>()));
}

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
