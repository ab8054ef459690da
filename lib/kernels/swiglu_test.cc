#include "lib/kernels/swiglu.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/kernels/kernel_test_util.h"

// The fused op's CPU loop (swiglu_math.h, the math the CUDA kernel runs) against ATen's
// at::silu(gate) * up and its autograd gradients. Tolerances: fp32 1e-6 relative (the same
// formulas in fp32; ATen's vectorised exp and libm's expf may differ by an ulp); bf16 and fp16
// two steps of their rounding (2^-6, 2^-9 relative): ATen rounds silu(gate) (and, backward,
// grad * up) to the dtype before the product, the fused op rounds once.

namespace titan {
namespace {

Tolerance SwiGluTolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kBFloat16:
      return {0.015625, 1e-6};
    case at::kHalf:
      return {0.001953125, 1e-6};
    default:
      return {1e-6, 1e-6};
  }
}

// Random gates spread over silu's curve, with saturated ones and silu' = 0 (gate ~ -1.2785).
at::Tensor Gates(int64_t rows, int64_t cols) {
  at::Tensor gate = at::randn({rows, cols}) * 3;
  gate.view(-1).slice(0, 0, 6).copy_(at::tensor({-100.0f, -20.0f, -1.2785f, 0.0f, 20.0f, 100.0f}));
  return gate;
}

class FusedSwiGluCpuTest : public testing::TestWithParam<at::ScalarType> {};

TEST_P(FusedSwiGluCpuTest, MatchesAtenForwardAndBackward) {
  const at::ScalarType dtype = GetParam();
  at::manual_seed(0);
  const at::Tensor gate = Gates(37, 129).to(dtype);
  const at::Tensor up = at::randn({37, 129}).to(dtype);
  const at::Tensor grad = at::randn({37, 129}).to(dtype);
  ExpectSwiGluMatchesAten(FusedSwiGlu, gate, up, grad, SwiGluTolerance(dtype));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FusedSwiGluCpuTest,
                         testing::Values(at::kFloat, at::kBFloat16, at::kHalf));

TEST(FusedSwiGluTest, TakesStridedInputs) {
  at::manual_seed(1);
  const at::Tensor fused = at::randn({4, 5, 2 * 24});  // gate and up halves of one projection
  const at::Tensor gate = fused.narrow(-1, 0, 24);
  const at::Tensor up = fused.narrow(-1, 24, 24);
  const at::Tensor grad = at::randn({4, 5, 24});
  ExpectSwiGluMatchesAten(FusedSwiGlu, gate, up, grad, {1e-6, 1e-6});
}

TEST(FusedSwiGluTest, SupportsNamesWhatItRefuses) {
  using testing::HasSubstr;
  const at::Tensor gate = at::randn({3, 4});
  EXPECT_TRUE(FusedSwiGluSupports(gate, at::randn({3, 4})).ok());
  EXPECT_THAT(FusedSwiGluSupports(gate, at::randn({3, 5})).message(),
              HasSubstr("up: expected gate's [3, 4] Float on cpu, got [3, 5] Float on cpu"));
  EXPECT_THAT(FusedSwiGluSupports(gate, at::randn({3, 4}, at::kBFloat16)).message(),
              HasSubstr("got [3, 4] BFloat16"));
  EXPECT_THAT(FusedSwiGluSupports(gate.to(at::kDouble), at::randn({3, 4}, at::kDouble)).message(),
              HasSubstr("gate: expected float32, bfloat16 or float16, got Double"));
  EXPECT_THROW(FusedSwiGlu(gate, at::randn({3, 5})), c10::Error);
}

}  // namespace
}  // namespace titan
