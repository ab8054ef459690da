#include "lib/kernels/rope.h"

#include <torch/csrc/autograd/autograd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/kernels/kernel_test_util.h"
#include "lib/model/rope.h"

// The fused op's CPU loop (rope_math.h, the math the CUDA kernel runs) against ApplyRope's
// LibTorch composition, forward and backward. Tolerances: fp32 1e-6 (the same products and sums in
// the same order; only a contracted multiply-add, which x86-64's baseline lacks, could move an
// ulp); bf16 and fp16 one step of their rounding (2^-7, 2^-10 relative), for fp32 results that
// straddle a rounding boundary.

namespace titan {
namespace {

Tolerance RopeTolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16:
      return {0.0078125, 1e-6};
    case at::kHalf:
      return {0.0009765625, 1e-6};
    default:
      return {1e-6, 1e-6};
  }
}

RopeRotation MakeRotation(RopeLayout layout, int64_t batch, int64_t seq, int64_t head_dim,
                          bool per_batch_positions) {
  RopeConfig config;
  config.layout = layout;
  const RopeTables tables = ComputeRopeTables(config, head_dim, 512, at::kFloat);
  const at::Tensor positions =
      per_batch_positions ? at::randint(512, {batch, seq}, at::kLong) : at::Tensor();
  return RotationForPositions(tables, positions, seq);
}

class FusedRopeCpuTest : public testing::TestWithParam<RopeCase> {};

TEST_P(FusedRopeCpuTest, MatchesApplyRopeForwardAndBackward) {
  const RopeCase c = GetParam();
  at::manual_seed(0);
  const RopeRotation rotation = MakeRotation(c.layout, 2, 17, 64, c.per_batch_positions);
  const at::Tensor x = at::randn({2, 17, 3, 64}).to(c.dtype);
  const at::Tensor x_fused = x.clone().requires_grad_();
  const at::Tensor x_ref = x.clone().requires_grad_();
  const at::Tensor got = FusedRope(x_fused, rotation.cos, rotation.sin, PairingOf(c.layout));
  const at::Tensor want = ApplyRope(x_ref, rotation);
  const Tolerance tol = RopeTolerance(c.dtype);
  EXPECT_TRUE(AllClose(got, want, tol));
  EXPECT_FALSE(AllClose(got, x, tol)) << "the rotation should move x";
  const at::Tensor grad = at::randn(x.sizes()).to(c.dtype);
  got.backward(grad);
  want.backward(grad);
  EXPECT_TRUE(AllClose(x_fused.grad(), x_ref.grad(), tol));
}

INSTANTIATE_TEST_SUITE_P(LayoutsAndDtypes, FusedRopeCpuTest, testing::ValuesIn(AllRopeCases()));

TEST(FusedRopeTest, GradientOfTheGradientIsTheRotation) {
  at::manual_seed(1);
  const RopeRotation rotation = MakeRotation(RopeLayout::kRotateHalf, 2, 5, 8, true);
  const at::Tensor x = at::randn({2, 5, 3, 8}).requires_grad_();
  const at::Tensor grad = at::randn({2, 5, 3, 8}).requires_grad_();
  const at::Tensor out = FusedRope(x, rotation.cos, rotation.sin, RopePairing::kHalves);
  // x.grad = R^T grad, so d<x.grad, v>/d grad = R v.
  const at::Tensor grad_x =
      torch::autograd::grad({out}, {x}, {grad}, /*retain_graph=*/true, /*create_graph=*/true)[0];
  const at::Tensor v = at::randn({2, 5, 3, 8});
  const at::Tensor grad_grad = torch::autograd::grad({grad_x}, {grad}, {v})[0];
  EXPECT_TRUE(AllClose(grad_grad, ApplyRope(v, rotation), {1e-6, 1e-6}));
}

TEST(FusedRopeTest, TakesAStridedInput) {
  at::manual_seed(2);
  const RopeRotation rotation = MakeRotation(RopeLayout::kInterleaved, 2, 7, 16, false);
  const at::Tensor x = at::randn({2, 3, 7, 16}).transpose(1, 2);  // [B, S, H, D] of [B, H, S, D]
  EXPECT_TRUE(AllClose(FusedRope(x, rotation.cos, rotation.sin, RopePairing::kInterleaved),
                       ApplyRope(x, rotation), {1e-6, 1e-6}));
}

TEST(FusedRopeTest, SupportsNamesWhatItRefuses) {
  using testing::HasSubstr;
  const RopeRotation rotation = MakeRotation(RopeLayout::kInterleaved, 2, 7, 16, false);
  const at::Tensor& cos = rotation.cos;
  const at::Tensor& sin = rotation.sin;
  const at::Tensor x = at::randn({2, 7, 3, 16});
  EXPECT_TRUE(FusedRopeSupports(x, cos, sin).ok());
  EXPECT_THAT(FusedRopeSupports(at::randn({2, 7, 3, 15}), cos, sin).message(), HasSubstr("D even"));
  EXPECT_THAT(FusedRopeSupports(x.to(at::kDouble), cos, sin).message(),
              HasSubstr("x: expected float32, bfloat16 or float16, got Double"));
  EXPECT_THAT(FusedRopeSupports(x, cos.slice(1, 0, 6), sin).message(),
              HasSubstr("cos: expected [1 or 2, 7, 1, 8]"));
  EXPECT_THAT(FusedRopeSupports(x, cos, sin.to(at::kBFloat16)).message(),
              HasSubstr("sin: expected float32"));
  EXPECT_THAT(FusedRopeSupports(x, cos.clone().requires_grad_(), sin).message(),
              HasSubstr("differentiates x only"));
  // Both pass their own checks ([1 or B, ...]) but differ: one batch of cos, two of sin.
  const at::Tensor sin_per_batch = sin.expand({2, -1, -1, -1}).contiguous();
  EXPECT_THAT(FusedRopeSupports(x, cos, sin_per_batch).message(),
              HasSubstr("sin: expected cos's shape"));
  EXPECT_THROW(FusedRope(x.to(at::kDouble), cos, sin, RopePairing::kInterleaved), c10::Error);
}

}  // namespace
}  // namespace titan
