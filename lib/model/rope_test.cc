#include "lib/model/rope.h"

#include <cmath>

#include "gtest/gtest.h"
#include "lib/model/transformer_args.h"

namespace titan {
namespace {

TEST(RopeTest, RotaryEmbeddingMatchesComplexMultiplication) {
  at::manual_seed(0);
  const int64_t head_dim = 8;
  RopeTables rope = ComputeRopeTables(RopeConfig{}, head_dim, 16, at::kFloat);
  at::Tensor x = at::randn({2, 5, 3, head_dim});
  at::Tensor got = ApplyRope(x, RotationForPositions(rope, at::Tensor(), 5));
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

TEST(RopeTest, Llama31ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  RopeConfig plain_config;
  plain_config.theta = 500000.0;
  RopeConfig scaling = plain_config;
  scaling.scaling = RopeScalingType::kLlama3;
  scaling.factor = 8;
  RopeTables plain = ComputeRopeTables(plain_config, 128, 2, at::kFloat);
  RopeTables scaled = ComputeRopeTables(scaling, 128, 2, at::kFloat);
  // Row 1 holds the frequencies themselves (angle = 1 * freq), recovered via atan2.
  at::Tensor f_plain = at::atan2(plain.sin[1], plain.cos[1]);
  at::Tensor f_scaled = at::atan2(scaled.sin[1], scaled.cos[1]);
  EXPECT_NEAR(f_scaled[0].item<float>(), f_plain[0].item<float>(), 1e-6);  // wavelength < 2048
  EXPECT_NEAR(f_scaled[63].item<float>(), f_plain[63].item<float>() / 8, 1e-9);
}

TEST(RopeTest, RotateHalfLayoutMatchesHuggingFaceFormula) {
  at::manual_seed(2);
  RopeConfig config;
  config.layout = RopeLayout::kRotateHalf;
  config.theta = 1e6;
  const int64_t d = 16;
  RopeTables rope = ComputeRopeTables(config, d, 32, at::kFloat);
  at::Tensor x = at::randn({2, 7, 3, d});
  at::Tensor got = ApplyRope(x, RotationForPositions(rope, at::Tensor(), 7));
  // transformers: x * cat(cos, cos) + rotate_half(x) * cat(sin, sin), rotate_half = cat(-x2, x1).
  at::Tensor cos = at::cat({rope.cos, rope.cos}, -1).slice(0, 0, 7).unsqueeze(0).unsqueeze(2);
  at::Tensor sin = at::cat({rope.sin, rope.sin}, -1).slice(0, 0, 7).unsqueeze(0).unsqueeze(2);
  at::Tensor rotated = at::cat({-x.slice(-1, d / 2), x.slice(-1, 0, d / 2)}, -1);
  EXPECT_TRUE(at::allclose(got, x * cos + rotated * sin, 1e-6, 1e-6));
}

TEST(RopeTest, ExplicitPositionsPickTheirRows) {
  at::manual_seed(3);
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kRotateHalf}) {
    RopeConfig config;
    config.layout = layout;
    RopeTables rope = ComputeRopeTables(config, 8, 64, at::kFloat);
    at::Tensor x = at::randn({2, 4, 2, 8});
    // Row 0 at positions 10..13, row 1 at 0..3: each row equals the plain rotation of that range.
    at::Tensor positions = at::stack({at::arange(10, 14), at::arange(0, 4)}).to(at::kLong);
    at::Tensor got = ApplyRope(x, RotationForPositions(rope, positions, 4));
    RopeTables shifted = rope;
    shifted.cos = rope.cos.slice(0, 10);
    shifted.sin = rope.sin.slice(0, 10);
    EXPECT_TRUE(at::equal(got[0], ApplyRope(x.slice(0, 0, 1),
                                            RotationForPositions(shifted, at::Tensor(), 4))[0]));
    EXPECT_TRUE(at::equal(got[1], ApplyRope(x.slice(0, 1, 2),
                                            RotationForPositions(rope, at::Tensor(), 4))[0]));
  }
}

TEST(RopeTest, DisabledRopeIsTheIdentity) {
  RopeConfig config;
  config.enabled = false;
  RopeTables rope = ComputeRopeTables(config, 8, 16, at::kFloat);
  at::Tensor x = at::randn({1, 3, 2, 8});
  EXPECT_TRUE(at::equal(ApplyRope(x, RotationForPositions(rope, at::Tensor(), 3)), x));
}

TEST(RopeTest, YarnBlendsInterpolationAndExtrapolationWithAttentionFactor) {
  RopeConfig config;
  config.theta = 10000;
  config.scaling = RopeScalingType::kYarn;
  config.factor = 4;
  config.original_max_position_embeddings = 4096;
  RopeFrequencies yarn = ComputeRopeFrequencies(config, 64);
  config.scaling = RopeScalingType::kNone;
  RopeFrequencies plain = ComputeRopeFrequencies(config, 64);
  // Fastest frequencies are kept, slowest divided by the factor; cos/sin scaled by 0.1 ln 4 + 1.
  EXPECT_DOUBLE_EQ(yarn.inv_freq[0].item<double>(), plain.inv_freq[0].item<double>());
  EXPECT_DOUBLE_EQ(yarn.inv_freq[31].item<double>(), plain.inv_freq[31].item<double>() / 4);
  EXPECT_DOUBLE_EQ(yarn.attention_factor, 0.1 * std::log(4.0) + 1);
}

// transformers applies YaRN whatever the factor (it only warns below 1): titan skipped it.
TEST(RopeTest, YarnAtOrBelowFactorOneBlendsAndKeepsAnExplicitAttentionFactor) {
  RopeConfig config;
  config.scaling = RopeScalingType::kYarn;
  config.original_max_position_embeddings = 4096;
  config.factor = 1;
  config.attention_factor = 0.7;
  RopeFrequencies one = ComputeRopeFrequencies(config, 64);
  config.factor = 0.5;
  config.attention_factor = 0;
  RopeFrequencies half = ComputeRopeFrequencies(config, 64);
  config.scaling = RopeScalingType::kNone;
  RopeFrequencies plain = ComputeRopeFrequencies(config, 64);
  EXPECT_TRUE(at::allclose(one.inv_freq, plain.inv_freq));
  EXPECT_DOUBLE_EQ(one.attention_factor, 0.7);
  // Slowest frequencies are multiplied by 1 / 0.5; no attention factor below 1.
  EXPECT_DOUBLE_EQ(half.inv_freq[0].item<double>(), plain.inv_freq[0].item<double>());
  EXPECT_DOUBLE_EQ(half.inv_freq[31].item<double>(), plain.inv_freq[31].item<double>() * 2);
  EXPECT_DOUBLE_EQ(half.attention_factor, 1);
}

}  // namespace
}  // namespace titan
