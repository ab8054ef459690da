// MixedPrecisionLinear on the CPU (its fp32 GEMM stands in for CUDA's bf16 GEMM with an fp32
// output; cuda_kernels_test runs the CUDA one): autocast's forward bit for bit, and gradients in
// each input's dtype that are closer to the exact product than autocast's bf16-rounded ones.
#include "lib/model/mixed_precision_linear.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include "gtest/gtest.h"
#include "lib/kernels/kernel_test_util.h"

namespace titan {
namespace {

TEST(MixedPrecisionLinearTest, ForwardAsAutocastGradientsFromTheFp32Accumulator) {
  at::manual_seed(0);
  const at::Tensor x = at::randn({2, 64, 96}).requires_grad_();
  const at::Tensor weight = at::randn({48, 96}).requires_grad_();
  const at::Tensor out = MixedPrecisionLinear(x, weight, at::kBFloat16);
  EXPECT_EQ(out.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(out, at::linear(x.to(at::kBFloat16), weight.to(at::kBFloat16))));

  const at::Tensor grad = at::randn(out.sizes()).to(at::kBFloat16);
  out.backward(grad);
  ASSERT_EQ(x.grad().scalar_type(), at::kFloat);
  ASSERT_EQ(weight.grad().scalar_type(), at::kFloat);
  // The exact products of the bf16 operands, in fp64.
  const at::Tensor g = grad.to(at::kDouble).reshape({-1, 48});
  const at::Tensor x_low = x.detach().to(at::kBFloat16).to(at::kDouble).reshape({-1, 96});
  const at::Tensor w_low = weight.detach().to(at::kBFloat16).to(at::kDouble);
  const at::Tensor want_weight = g.t().mm(x_low);
  const at::Tensor want_x = g.mm(w_low).view(x.sizes());
  // fp32 accumulation over 128 (weight) and 48 (input) terms: far below bf16's 2^-9.
  EXPECT_LT(MaxRelativeError(weight.grad(), want_weight), 1e-6);
  EXPECT_LT(MaxRelativeError(x.grad(), want_x), 1e-6);
  // Autocast's gradients are rounded to bf16 on the way: about 2^-9 off.
  const at::Tensor x_ref = x.detach().clone().requires_grad_();
  const at::Tensor weight_ref = weight.detach().clone().requires_grad_();
  at::linear(x_ref.to(at::kBFloat16), weight_ref.to(at::kBFloat16)).backward(grad);
  EXPECT_GT(MaxRelativeError(weight_ref.grad(), want_weight), 1e-4);
}

// Selective checkpointing's replay hands in the kept output: returned as is, same gradients.
TEST(MixedPrecisionLinearTest, KeptOutputGivesTheSameGradients) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({8, 16}).requires_grad_();
  const at::Tensor weight = at::randn({4, 16}).requires_grad_();
  const at::Tensor computed = MixedPrecisionLinear(x, weight, at::kBFloat16);
  const at::Tensor kept = computed.detach().clone();
  const at::Tensor x2 = x.detach().clone().requires_grad_();
  const at::Tensor weight2 = weight.detach().clone().requires_grad_();
  const at::Tensor replayed = MixedPrecisionLinear(x2, weight2, at::kBFloat16, kept);
  EXPECT_TRUE(at::equal(replayed, kept));
  const at::Tensor grad = at::randn({8, 4}).to(at::kBFloat16);
  computed.backward(grad);
  replayed.backward(grad);
  EXPECT_TRUE(at::equal(x.grad(), x2.grad()));
  EXPECT_TRUE(at::equal(weight.grad(), weight2.grad()));
}

// Consecutive casts of one unchanged tensor share one copy; a change, another tensor or another
// dtype cast anew.
TEST(MixedPrecisionLinearTest, CastInputOnceSharesTheCastOfAnUnchangedInput) {
  at::Tensor x = at::randn({4, 8});
  const at::Tensor first = CastInputOnce(x, at::kBFloat16);
  EXPECT_TRUE(CastInputOnce(x, at::kBFloat16).is_same(first));
  EXPECT_FALSE(CastInputOnce(x, at::kHalf).is_same(first));
  const at::Tensor again = CastInputOnce(x, at::kBFloat16);
  EXPECT_FALSE(again.is_same(first));  // the fp16 cast came between
  x.add_(1);
  const at::Tensor changed = CastInputOnce(x, at::kBFloat16);
  EXPECT_FALSE(changed.is_same(again));
  EXPECT_TRUE(at::equal(changed, x.to(at::kBFloat16)));
  EXPECT_FALSE(CastInputOnce(x.clone(), at::kBFloat16).is_same(changed));
  EXPECT_TRUE(CastInputOnce(changed, at::kBFloat16).is_same(changed));  // already that dtype
}

// Two linears on one input (as wq and wk) share its cast and still get their own gradients.
TEST(MixedPrecisionLinearTest, LinearsSharingAnInputCastGetTheirGradients) {
  at::manual_seed(2);
  const at::Tensor x = at::randn({16, 32}).requires_grad_();
  const at::Tensor w1 = at::randn({8, 32}).requires_grad_();
  const at::Tensor w2 = at::randn({4, 32}).requires_grad_();
  const at::Tensor g1 = at::randn({16, 8}).to(at::kBFloat16);
  const at::Tensor g2 = at::randn({16, 4}).to(at::kBFloat16);
  torch::autograd::backward(
      {MixedPrecisionLinear(x, w1, at::kBFloat16), MixedPrecisionLinear(x, w2, at::kBFloat16)},
      {g1, g2});
  const at::Tensor x_low = x.detach().to(at::kBFloat16).to(at::kDouble);
  const auto low = [](const at::Tensor& t) { return t.detach().to(at::kBFloat16).to(at::kDouble); };
  EXPECT_LT(MaxRelativeError(w1.grad(), g1.to(at::kDouble).t().mm(x_low)), 1e-6);
  EXPECT_LT(MaxRelativeError(w2.grad(), g2.to(at::kDouble).t().mm(x_low)), 1e-6);
  EXPECT_LT(
      MaxRelativeError(x.grad(), g1.to(at::kDouble).mm(low(w1)) + g2.to(at::kDouble).mm(low(w2))),
      1e-6);
}

TEST(MixedPrecisionLinearTest, NotTakenOnTheCpu) {
  const at::Tensor x = at::randn({4, 8});
  const at::Tensor weight = at::randn({8, 8}).requires_grad_();
  EXPECT_FALSE(TakesMixedPrecisionLinear(x, weight));
}

}  // namespace
}  // namespace titan
