#include "lib/model/transformer_ops.h"

#include <cmath>

#include "gtest/gtest.h"
#include "lib/model/init.h"

namespace titan {
namespace {

TEST(TransformerOpsTest, FeedForwardHiddenDimMatchesLlamaShapes) {
  EXPECT_EQ(FeedForwardHiddenDim(256, 256, 0), 768);       // debugmodel
  EXPECT_EQ(FeedForwardHiddenDim(4096, 1024, 1.3), 14336);  // Llama 3.1 8B
  EXPECT_EQ(FeedForwardHiddenDim(8192, 4096, 1.3), 28672);  // 70B
  EXPECT_EQ(FeedForwardHiddenDim(16384, 4096, 1.2), 53248);  // 405B
  EXPECT_EQ(FeedForwardHiddenDim(2048, 256, 1.5), 8192);    // Llama 3.2 1B
}

TEST(TransformerOpsTest, RotaryEmbeddingMatchesComplexMultiplication) {
  at::manual_seed(0);
  const int64_t head_dim = 8;
  RopeTables rope = ComputeRopeTables(head_dim, 16, 10000.0, RopeScaling{}, at::kFloat);
  at::Tensor x = at::randn({2, 5, 3, head_dim});
  at::Tensor got = ApplyRotaryEmbedding(x, rope);
  // Reference: Meta's formulation, x as complex pairs times exp(i * pos * freq).
  at::Tensor freqs = 1.0 / at::pow(10000.0, at::arange(0, head_dim, 2, at::kDouble) / head_dim);
  at::Tensor angles = at::outer(at::arange(5, at::kDouble), freqs).to(at::kFloat);
  at::Tensor cis = at::polar(at::ones_like(angles), angles).unsqueeze(0).unsqueeze(2);
  at::Tensor xc = at::view_as_complex(x.reshape({2, 5, 3, head_dim / 2, 2}).contiguous());
  at::Tensor want = at::view_as_real(xc * cis).flatten(-2);
  EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6));
  // Position 0 is the identity.
  EXPECT_TRUE(at::allclose(got.select(1, 0), x.select(1, 0)));
}

TEST(TransformerOpsTest, Llama31ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  RopeScaling scaling{8, 1, 4, 8192};
  RopeTables plain = ComputeRopeTables(128, 2, 500000.0, RopeScaling{}, at::kFloat);
  RopeTables scaled = ComputeRopeTables(128, 2, 500000.0, scaling, at::kFloat);
  // Row 1 holds the frequencies themselves (angle = 1 * freq), recovered via atan2.
  at::Tensor f_plain = at::atan2(plain.sin[1], plain.cos[1]);
  at::Tensor f_scaled = at::atan2(scaled.sin[1], scaled.cos[1]);
  EXPECT_NEAR(f_scaled[0].item<float>(), f_plain[0].item<float>(), 1e-6);  // wavelength < 2048
  EXPECT_NEAR(f_scaled[63].item<float>(), f_plain[63].item<float>() / 8, 1e-9);
}

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
