#include "lib/model/transformer_ops.h"

#include <cmath>

#include "gtest/gtest.h"
#include "lib/model/init.h"

namespace titan {
namespace {

TEST(TransformerOpsTest, RmsNormNormalisesLastDim) {
  at::Tensor x = at::tensor({3.0f, 4.0f}).view({1, 2});
  at::Tensor w = at::tensor({1.0f, 2.0f});
  at::Tensor y = RmsNorm(x, w, 0.0);
  const double rms = std::sqrt((9.0 + 16.0) / 2.0);
  EXPECT_NEAR(y[0][0].item<float>(), 3.0 / rms, 1e-6);
  EXPECT_NEAR(y[0][1].item<float>(), 2 * 4.0 / rms, 1e-6);
}

TEST(TransformerOpsTest, TruncNormalStaysInBoundsWithRequestedStd) {
  at::manual_seed(1);
  at::Tensor t = at::empty({200000});
  TruncNormal_(t, 0.0, 0.02, -0.04, 0.04);
  EXPECT_GE(t.min().item<float>(), -0.04f);
  EXPECT_LE(t.max().item<float>(), 0.04f);
  // A normal truncated at 2 sigma has std 0.8796 sigma.
  EXPECT_NEAR(t.std().item<float>(), 0.02 * 0.8796, 2e-4);
  EXPECT_NEAR(t.mean().item<float>(), 0.0, 2e-4);
}

}  // namespace
}  // namespace titan
