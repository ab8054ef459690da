#include "lib/train/optimizer.h"

#include <c10/core/GradMode.h>

#include "gtest/gtest.h"

namespace titan {
namespace {

struct TwoParams {
  at::Tensor matrix = at::ones({2, 3}).set_requires_grad(true);
  at::Tensor norm = at::ones({3}).set_requires_grad(true);
  std::vector<ParamRef> refs() { return {{"w.weight", &matrix}, {"norm.weight", &norm}}; }
};

void Backward(TwoParams& p) { (p.matrix.sum() * 2 + p.norm.sum()).backward(); }

TEST(OptimizerTest, WeightDecayOnlyOnMatrices) {
  TwoParams p;
  OptimizerOptions options;
  options.lr = 0.1;
  options.weight_decay = 0.5;
  auto opt = Optimizer::Create(p.refs(), options).value();
  opt->ZeroGrad();
  // Zero gradients: only weight decay moves a parameter.
  p.matrix.mutable_grad() = at::zeros_like(p.matrix);
  p.norm.mutable_grad() = at::zeros_like(p.norm);
  opt->Step();
  EXPECT_NEAR(p.matrix[0][0].item<float>(), 1.0 - 0.1 * 0.5, 1e-6);
  EXPECT_FLOAT_EQ(p.norm[0].item<float>(), 1.0f);
}

TEST(OptimizerTest, StateRoundTripContinuesBitwise) {
  TwoParams a, b;
  OptimizerOptions options;
  auto opt_a = Optimizer::Create(a.refs(), options).value();
  for (int i = 0; i < 3; ++i) {
    opt_a->ZeroGrad();
    Backward(a);
    opt_a->Step();
  }
  // b starts from a's parameters and optimizer state, then both take the same step.
  {
    c10::NoGradGuard no_grad;
    b.matrix.copy_(a.matrix);
    b.norm.copy_(a.norm);
  }
  auto opt_b = Optimizer::Create(b.refs(), options).value();
  ASSERT_TRUE(opt_b->LoadStateDict(opt_a->StateDict()).ok());
  for (auto* pair : {&a, &b}) {
    (pair == &a ? opt_a : opt_b)->ZeroGrad();
    Backward(*pair);
    (pair == &a ? opt_a : opt_b)->Step();
  }
  EXPECT_TRUE(at::equal(a.matrix, b.matrix));
  EXPECT_TRUE(at::equal(a.norm, b.norm));
}

TEST(OptimizerTest, LrFactorScalesBaseLr) {
  TwoParams p;
  OptimizerOptions options;
  options.lr = 0.01;
  auto opt = Optimizer::Create(p.refs(), options).value();
  opt->SetLrFactor(0.5);
  EXPECT_DOUBLE_EQ(opt->lr(), 0.005);
}

TEST(OptimizerTest, RejectsMissingStateAndUnknownOptimizer) {
  TwoParams p;
  auto opt = Optimizer::Create(p.refs(), OptimizerOptions{}).value();
  absl::Status status = opt->LoadStateDict({});
  EXPECT_NE(status.message().find("w.weight"), std::string::npos);
  OptimizerOptions sgd;
  sgd.name = "SGD";
  EXPECT_FALSE(Optimizer::Create(p.refs(), sgd).ok());
}

}  // namespace
}  // namespace titan
