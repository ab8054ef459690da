#include "lib/float8/float8_linear.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "lib/float8/float8_converter.h"
#include "lib/model/autocast.h"
#include "lib/model/batch_invariant.h"
#include "lib/model/module.h"

namespace titan {
namespace {

double RelativeError(const at::Tensor& value, const at::Tensor& reference) {
  return ((value.to(at::kFloat) - reference).norm() / reference.norm()).item<double>();
}

TEST(CastToFloat8Test, TensorwiseMapsTheLargestMagnitudeOntoTheFormatsMax) {
  at::manual_seed(0);
  const at::Tensor hp = at::randn({32, 16}) * 3;
  const Float8Tensor cast = CastToFloat8(hp, at::kFloat8_e4m3fn, std::nullopt, false);
  EXPECT_EQ(cast.scale.dim(), 0);
  EXPECT_EQ(cast.data.scalar_type(), at::kFloat8_e4m3fn);
  EXPECT_FLOAT_EQ(cast.data.to(at::kFloat).abs().max().item<float>(), 448.0F);
  // e4m3 keeps 3 mantissa bits: every normal value within 2^-4 relative.
  const at::Tensor back = cast.data.to(at::kFloat) / cast.scale;
  const at::Tensor normal = hp.abs() * cast.scale > std::ldexp(1.0, -6);
  EXPECT_LE(((back - hp).abs() / hp.abs()).masked_select(normal).max().item<double>(), 0.0625);
}

TEST(CastToFloat8Test, RowwiseScalesEachRowAndRoundsScalesToPowersOf2) {
  at::manual_seed(0);
  const at::Tensor hp = at::randn({8, 16}) * at::logspace(-3, 3, 8).view({8, 1});
  const Float8Tensor cast = CastToFloat8(hp, at::kFloat8_e4m3fn, -1, true);
  ASSERT_EQ(cast.scale.sizes(), (std::vector<int64_t>{8, 1}));
  const at::Tensor exponent = at::log2(cast.scale);
  EXPECT_TRUE(at::equal(exponent, at::round(exponent)));
  // Rounded down: each row's largest value lands in [224, 448] (e4m3 rounds (224, 232) to 224).
  const at::Tensor row_max = cast.data.to(at::kFloat).abs().amax({1});
  EXPECT_TRUE((row_max >= 224).all().item<bool>());
  EXPECT_TRUE((row_max <= 448).all().item<bool>());
}

TEST(CastToFloat8Test, AllZeroTensorGetsAFiniteScale) {
  const Float8Tensor cast = CastToFloat8(at::zeros({4, 4}), at::kFloat8_e5m2, std::nullopt, false);
  EXPECT_TRUE(std::isfinite(cast.scale.item<float>()));
  EXPECT_EQ(cast.data.to(at::kFloat).abs().max().item<float>(), 0.0F);
}

TEST(Float8MatmulTest, OddContractedDimIsPaddedWithoutChangingTheProduct) {
  at::manual_seed(0);
  // 20 contracted elements (a microbatch's tokens in grad_weight): CUDA needs a multiple of 16.
  // Unit scales, so that anything but zeros in the padding shows at the output's magnitude.
  const at::Tensor one = at::ones({});
  const Float8Tensor a{at::randn({8, 20}).to(at::kFloat8_e5m2), one};
  const Float8Tensor b{at::randn({20, 32}).to(at::kFloat8_e4m3fn), one};
  const at::Tensor padded = Float8Matmul(a, b, at::kFloat, false, /*emulate=*/false);
  // The CPU kernel takes the unpadded operands.
  const at::Tensor unpadded =
      at::_scaled_mm(a.data, b.data.t().contiguous().t(), a.scale.reciprocal(),
                     b.scale.reciprocal(), std::nullopt, std::nullopt, at::kFloat, false);
  ASSERT_EQ(padded.sizes(), unpadded.sizes());
  EXPECT_LT(RelativeError(padded, unpadded), 1e-6);
}

TEST(Float8MatmulTest, RowwiseScalesAppliedAfterTheMatmulEqualTheEmulation) {
  at::manual_seed(0);
  // Scales over six decades, so a row or column scaled wrongly stands out.
  const at::Tensor a_hp = at::randn({16, 32}) * at::logspace(-3, 3, 16).view({16, 1});
  const at::Tensor b_hp = at::randn({32, 48}) * at::logspace(-3, 3, 48).view({1, 48});
  const Float8Tensor a = CastToFloat8(a_hp, at::kFloat8_e4m3fn, -1, true);
  const Float8Tensor b = CastToFloat8(b_hp, at::kFloat8_e4m3fn, 0, true);
  const at::Tensor kernel = Float8Matmul(a, b, at::kBFloat16, false, /*emulate=*/false);
  const at::Tensor emulated = Float8Matmul(a, b, at::kBFloat16, false, /*emulate=*/true);
  // Power-of-2 scales are exact to apply before or after; the fp32 sums differ only in order,
  // so the bf16 results agree within one rounding (2^-8 relative).
  const at::Tensor relative =
      (kernel.to(at::kFloat) - emulated.to(at::kFloat)).abs() / emulated.to(at::kFloat).abs();
  EXPECT_LE(relative.max().item<double>(), std::ldexp(1.0, -8));
  // In fp32 the product is not rounded to bf16 on the way: only the sums' order differs, within
  // fp32's rounding of the sum of |products| (32 terms: 2^-19 is 16x headroom).
  const at::Tensor kernel_fp32 = Float8Matmul(a, b, at::kFloat, false, /*emulate=*/false);
  const at::Tensor emulated_fp32 = Float8Matmul(a, b, at::kFloat, false, /*emulate=*/true);
  const at::Tensor magnitude =
      at::mm((a.data.to(at::kFloat) / a.scale).abs(), (b.data.to(at::kFloat) / b.scale).abs());
  EXPECT_LE(((kernel_fp32 - emulated_fp32).abs() / magnitude).max().item<double>(),
            std::ldexp(1.0, -19));
}

struct LinearResult {
  at::Tensor out, grad_x, grad_weight;
};

LinearResult RunLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& grad,
                       const Float8LinearOptions* options, const at::Tensor& kept = {}) {
  const at::Tensor x_leaf = x.clone().set_requires_grad(true);
  const at::Tensor weight_leaf = weight.clone().set_requires_grad(true);
  const at::Tensor out = options != nullptr ? Float8Linear(x_leaf, weight_leaf, *options, kept)
                                            : at::linear(x_leaf, weight_leaf);
  out.backward(grad);
  return {out.detach(), x_leaf.grad(), weight_leaf.grad()};
}

class Float8LinearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    at::manual_seed(0);
    x_ = at::randn({4, 16, 64});
    weight_ = at::randn({32, 64}) * 0.1;
    grad_ = at::randn({4, 16, 32}) * 1e-2;
  }
  at::Tensor x_, weight_, grad_;
};

TEST_F(Float8LinearTest, EveryRecipeStaysCloseToTheHighPrecisionLinear) {
  const LinearResult exact = RunLinear(x_, weight_, grad_, nullptr);
  // Relative Frobenius error: e4m3 rounds by at most 2^-4, e5m2 (tensorwise gradients) by 2^-3;
  // torchao gives 3.6-3.9% (outputs) and 3.8-6.0% (gradients) on this data, the bounds sit above.
  for (Float8Recipe recipe :
       {Float8Recipe::kTensorwise, Float8Recipe::kRowwise, Float8Recipe::kRowwiseWithGwHp}) {
    const Float8LinearOptions options{recipe, /*emulate=*/true};
    const LinearResult f8 = RunLinear(x_, weight_, grad_, &options);
    SCOPED_TRACE(Float8RecipeName(recipe));
    EXPECT_LT(RelativeError(f8.out, exact.out), 0.05);
    EXPECT_LT(RelativeError(f8.grad_x, exact.grad_x), 0.08);
    EXPECT_LT(RelativeError(f8.grad_weight, exact.grad_weight), 0.08);
    EXPECT_GT(RelativeError(f8.out, exact.out), 1e-4);  // float8 really ran
    if (recipe == Float8Recipe::kRowwiseWithGwHp) {
      EXPECT_LT(RelativeError(f8.grad_weight, exact.grad_weight), 1e-6);
    }
  }
}

TEST_F(Float8LinearTest, CpuScaledMatmulEqualsItsEmulation) {
  const Float8LinearOptions kernel{Float8Recipe::kTensorwise, false};
  const Float8LinearOptions emulated{Float8Recipe::kTensorwise, true};
  const LinearResult a = RunLinear(x_, weight_, grad_, &kernel);
  const LinearResult b = RunLinear(x_, weight_, grad_, &emulated);
  // Same float8 operands; only the fp32 accumulation order differs.
  EXPECT_LT(RelativeError(a.out, b.out), 1e-6);
  EXPECT_LT(RelativeError(a.grad_x, b.grad_x), 1e-6);
  EXPECT_LT(RelativeError(a.grad_weight, b.grad_weight), 1e-6);
}

TEST_F(Float8LinearTest, KeptOutputIsReturnedWithTheFloat8Backward) {
  const Float8LinearOptions options{Float8Recipe::kRowwise, true};
  const LinearResult computed = RunLinear(x_, weight_, grad_, &options);
  const at::Tensor kept = computed.out.clone();
  const LinearResult replayed = RunLinear(x_, weight_, grad_, &options, kept);
  EXPECT_TRUE(at::equal(replayed.out, kept));
  EXPECT_TRUE(at::equal(replayed.grad_x, computed.grad_x));
  EXPECT_TRUE(at::equal(replayed.grad_weight, computed.grad_weight));
}

// Backward on forward's kept casts (tensorwise: the input's, and the weight's where asked)
// equals backward casting again (the replay of a kept output keeps none), bit for bit, also when
// only one gradient is wanted.
TEST_F(Float8LinearTest, KeptCastsEqualCastingAgain) {
  for (const bool emulate : {true, false}) {
    Float8LinearOptions options{Float8Recipe::kTensorwise, emulate};
    options.keep_weight_cast = true;
    SCOPED_TRACE(emulate ? "emulated" : "CPU _scaled_mm");
    const LinearResult kept = RunLinear(x_, weight_, grad_, &options);
    const LinearResult cast_again = RunLinear(x_, weight_, grad_, &options, kept.out.clone());
    EXPECT_TRUE(at::equal(kept.grad_x, cast_again.grad_x));
    EXPECT_TRUE(at::equal(kept.grad_weight, cast_again.grad_weight));
    for (const bool x_wants_grad : {true, false}) {
      const at::Tensor x = x_.clone().set_requires_grad(x_wants_grad);
      const at::Tensor weight = weight_.clone().set_requires_grad(!x_wants_grad);
      Float8Linear(x, weight, options).backward(grad_);
      EXPECT_TRUE(x_wants_grad ? at::equal(x.grad(), kept.grad_x)
                               : at::equal(weight.grad(), kept.grad_weight));
    }
  }
}

TEST_F(Float8LinearTest, RegisteredWeightCastReplacesTheLinearsOwn) {
  const Float8LinearOptions options{Float8Recipe::kTensorwise, true};
  const LinearResult own = RunLinear(x_, weight_, grad_, &options);
  // A cast of another weight, registered for this one: the linear must compute with it.
  const at::Tensor other = weight_ * 2 + 0.01;
  const LinearResult other_result = RunLinear(x_, other, grad_, &options);
  const at::Tensor leaf = weight_.clone().set_requires_grad(true);
  RegisterFloat8Weight(leaf, CastToFloat8(other, at::kFloat8_e4m3fn, std::nullopt, false));
  const at::Tensor x = x_.clone().set_requires_grad(true);
  const at::Tensor out = Float8Linear(x, leaf, options);
  UnregisterFloat8Weight(leaf);
  out.backward(grad_);
  EXPECT_TRUE(at::equal(out, other_result.out));
  EXPECT_TRUE(at::equal(x.grad(), other_result.grad_x));  // backward reuses the cast
  EXPECT_TRUE(at::equal(leaf.grad(), own.grad_weight));   // needs no weight
  EXPECT_TRUE(at::equal(Float8Linear(x_, leaf, options), own.out));  // unregistered: its own
}

// wq, wk and wv read one input: the first casts it, the others take that cast (under tensor
// parallelism, one all-reduce of its maximum, not three), with the bits of casting it each.
TEST_F(Float8LinearTest, LinearsReadingOneInputCastItOnce) {
  for (const Float8Recipe recipe : {Float8Recipe::kTensorwise, Float8Recipe::kRowwise}) {
    SCOPED_TRACE(Float8RecipeName(recipe));
    int reductions = 0;
    Float8LinearOptions options{recipe, /*emulate=*/true};
    options.split_dim = 1;  // row-parallel: the input's and the weight's maxima are reduced
    options.reduce_max = [&reductions](at::Tensor&) { ++reductions; };
    const std::vector<at::Tensor> weights = {weight_, weight_ * 0.5, weight_ + 0.01};
    const at::Tensor x = x_.clone().set_requires_grad(true);
    std::vector<at::Tensor> leaves;
    at::Tensor sum = at::zeros({});
    for (const at::Tensor& weight : weights) {
      leaves.push_back(weight.clone().set_requires_grad(true));
      sum = sum + (Float8Linear(x, leaves.back(), options) * grad_).sum();
    }
    EXPECT_EQ(reductions, 1 + 3);  // the input once, each weight
    sum.backward();
    // Each on its own copy of x, cast three times.
    at::Tensor grad_x = at::zeros_like(x_);
    for (size_t i = 0; i < weights.size(); ++i) {
      const LinearResult own = RunLinear(x_, weights[i], grad_, &options);
      EXPECT_TRUE(at::equal(leaves[i].grad(), own.grad_weight));
      grad_x = grad_x + own.grad_x;
    }
    EXPECT_LT(RelativeError(x.grad(), grad_x), 1e-6);  // the same terms, summed in another order
  }
}

TEST_F(Float8LinearTest, InputChangedInPlaceIsCastAgain) {
  const Float8LinearOptions options{Float8Recipe::kTensorwise, /*emulate=*/true};
  at::Tensor x = x_.clone();
  const at::Tensor first = Float8Linear(x, weight_, options);
  x.mul_(3);
  const at::Tensor second = Float8Linear(x, weight_, options);
  EXPECT_TRUE(at::equal(second, Float8Linear(x_ * 3, weight_, options)));
  EXPECT_FALSE(at::equal(second, first));
}

// Under autocast an fp32 input is cast to bf16 inside; its gradient comes back in fp32: in
// emulation the bf16 gradient cast (the bits of autocast's ToCopyBackward), from tensorwise's
// _scaled_mm in fp32 directly.
TEST_F(Float8LinearTest, Fp32InputUnderAutocastGetsAnFp32Gradient) {
  for (const bool emulate : {true, false}) {
    SCOPED_TRACE(emulate ? "emulated" : "CPU _scaled_mm");
    const Float8LinearOptions options{Float8Recipe::kTensorwise, emulate};
    LinearResult autocast;
    {
      AutocastScope bf16(at::kCPU, at::kBFloat16);
      autocast = RunLinear(x_, weight_, grad_, &options);
    }
    const at::Tensor x = x_.clone().set_requires_grad(true);
    const at::Tensor out = Float8Linear(x.to(at::kBFloat16), weight_, options);
    out.backward(grad_.to(at::kBFloat16));
    EXPECT_EQ(autocast.out.scalar_type(), at::kBFloat16);
    EXPECT_TRUE(at::equal(autocast.out, out));
    ASSERT_EQ(autocast.grad_x.scalar_type(), at::kFloat);
    if (emulate) {
      EXPECT_TRUE(at::equal(autocast.grad_x, x.grad()));
    } else {
      // Not rounded to bf16 on the way: within half a bf16 rounding of the rounded one.
      const at::Tensor error = (autocast.grad_x - x.grad()).abs();
      EXPECT_TRUE((error <= x.grad().abs() * std::ldexp(1.0, -8)).all().item<bool>());
      EXPECT_GT(error.max().item<double>(), 0);  // really fp32
    }
  }
}

class TwoLayers : public Module {
 public:
  TwoLayers() {
    const at::TensorOptions meta = at::TensorOptions().device(at::kMeta);
    wq_fn = &RegisterLinear("wq", RegisterParameter("wq.weight", {64, 32}, meta));
    odd_fn = &RegisterLinear("odd", RegisterParameter("odd.weight", {24, 40}, meta));
    output_fn = &RegisterLinear("output", RegisterParameter("output.weight", {128, 32}, meta));
  }
  const LinearFn* wq_fn;
  const LinearFn* odd_fn;
  const LinearFn* output_fn;
};

TEST(Float8ConverterTest, ConvertsUnfilteredLayersWithDimsOf16) {
  TwoLayers model;
  Float8ConverterOptions options;
  options.linear.emulate = true;
  options.filter_fqns = {"output"};
  const auto converted = ConvertToFloat8(model, options, at::Device(at::kCPU));
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(*converted, std::vector<std::string>{"wq"});
  EXPECT_TRUE(static_cast<bool>(*model.wq_fn));
  EXPECT_FALSE(static_cast<bool>(*model.odd_fn));  // 24 x 40: 40 is no multiple of 16
  EXPECT_FALSE(static_cast<bool>(*model.output_fn));
}

TEST(Float8ConverterTest, AFilterMatchingNoLinearLayerIsRefused) {
  TwoLayers model;
  // "odd" stays in high precision anyway (40 is no multiple of 16): it still names a layer.
  EXPECT_TRUE(CheckFloat8Filters(model, {"output", "odd", "w"}).ok());
  EXPECT_EQ(CheckFloat8Filters(model, {"output", "outptu"}).message(),
            "[float8] filter_fqns: \"outptu\" matches no linear layer's name (e.g. wq, output)");
  // "" is in every name: it would keep every layer in high precision.
  EXPECT_THAT(std::string(CheckFloat8Filters(model, {"output", ""}).message()),
              ::testing::HasSubstr("an empty entry matches every linear layer's name"));
}

TEST(Float8ConverterTest, RefusesWhatCannotRunAsAsked) {
  TwoLayers model;
  Float8ConverterOptions rowwise;
  rowwise.linear.recipe = Float8Recipe::kRowwise;
  const auto refused = ConvertToFloat8(model, rowwise, at::Device(at::kCPU));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("emulate = true"), std::string::npos);
  EXPECT_FALSE(static_cast<bool>(*model.wq_fn));
  rowwise.linear.emulate = true;
  EXPECT_TRUE(ConvertToFloat8(model, rowwise, at::Device(at::kCPU)).ok());

  SetBatchInvariant(true);
  const auto invariant = ConvertToFloat8(model, rowwise, at::Device(at::kCPU));
  SetBatchInvariant(false);
  ASSERT_FALSE(invariant.ok());
  EXPECT_NE(invariant.status().message().find("batch_invariant"), std::string::npos);
  EXPECT_FALSE(ParseFloat8Recipe("mxfp8").ok());
}

}  // namespace
}  // namespace titan
