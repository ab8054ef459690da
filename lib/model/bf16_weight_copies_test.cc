#include "lib/model/bf16_weight_copies.h"

#include <ATen/ATen.h>

#include "gtest/gtest.h"
#include "lib/model/mixed_precision_linear.h"

namespace titan {
namespace {

class Bf16WeightCopiesTest : public testing::Test {
 protected:
  void SetUp() override { SetBf16WeightCopiesEnabled(true); }
  void TearDown() override { SetBf16WeightCopiesEnabled(false); }
};

// What the optimizer does on its kernel path: write the copies asked for, then say so.
void WriteCopy(const at::Tensor& param, const at::Tensor& value) {
  const at::Tensor copy = Bf16WeightCopyToWrite(param);
  ASSERT_TRUE(copy.defined());
  copy.copy_(value);
  Bf16WeightCopyWritten(param);
}

TEST_F(Bf16WeightCopiesTest, AskedForWrittenThenTakenUntilTheWeightChanges) {
  at::manual_seed(0);
  const at::Tensor weight = at::randn({8, 16});
  EXPECT_FALSE(Bf16WeightCopyToWrite(weight).defined());                   // no linear asked yet
  EXPECT_TRUE(at::equal(Bf16WeightOf(weight), weight.to(at::kBFloat16)));  // a cast; asks
  // A stand-in value tells the copy from a cast.
  const at::Tensor stand_in = at::full({8, 16}, 3.0, at::kBFloat16);
  WriteCopy(weight, stand_in);
  const at::Tensor taken = Bf16WeightOf(weight);
  EXPECT_EQ(taken.data_ptr(), Bf16WeightCopyToWrite(weight).data_ptr());
  EXPECT_TRUE(at::equal(taken, stand_in));
  weight.add_(1);  // e.g. a checkpoint load: the copy is stale
  EXPECT_TRUE(at::equal(Bf16WeightOf(weight), weight.to(at::kBFloat16)));
  WriteCopy(weight, weight.to(at::kBFloat16));
  EXPECT_EQ(Bf16WeightOf(weight).data_ptr(), Bf16WeightCopyToWrite(weight).data_ptr());
}

TEST_F(Bf16WeightCopiesTest, StaleCopyIsDroppedAndComputedWeightsAreOnlyCast) {
  const at::Tensor weight = at::randn({8, 16});
  Bf16WeightOf(weight);
  WriteCopy(weight, weight.to(at::kBFloat16));
  const at::Tensor first = Bf16WeightCopyToWrite(weight);  // held: its memory is not reused
  weight.mul_(2);
  Bf16WeightOf(weight);  // stale: dropped, a new one is made for the next write
  const at::Tensor second = Bf16WeightCopyToWrite(weight);
  EXPECT_TRUE(second.defined());
  EXPECT_NE(second.data_ptr(), first.data_ptr());
  DropBf16WeightCopy(weight);
  EXPECT_FALSE(Bf16WeightCopyToWrite(weight).defined());
  // A weight that is not a leaf (FSDP's gathered weight, say) is never the optimizer's.
  const at::Tensor leaf = at::randn({4, 4}).requires_grad_();
  const at::Tensor gathered = leaf * 1;
  Bf16WeightOf(gathered);
  EXPECT_FALSE(Bf16WeightCopyToWrite(gathered).defined());
}

TEST_F(Bf16WeightCopiesTest, OffMeansCastsAndNoCopies) {
  SetBf16WeightCopiesEnabled(false);
  const at::Tensor weight = at::randn({4, 4});
  EXPECT_TRUE(at::equal(Bf16WeightOf(weight), weight.to(at::kBFloat16)));
  EXPECT_FALSE(Bf16WeightCopyToWrite(weight).defined());
}

// MixedPrecisionLinear computes with the copy (and its backward with it) where one is current.
TEST_F(Bf16WeightCopiesTest, MixedPrecisionLinearTakesTheCopy) {
  at::manual_seed(1);
  const at::Tensor x = at::randn({4, 16}).requires_grad_();
  const at::Tensor weight = at::randn({8, 16}).requires_grad_();
  MixedPrecisionLinear(x, weight, at::kBFloat16);  // asks
  const at::Tensor stand_in = (weight.detach() * 2).to(at::kBFloat16);
  WriteCopy(weight, stand_in);
  const at::Tensor out = MixedPrecisionLinear(x, weight, at::kBFloat16);
  EXPECT_TRUE(at::equal(out, at::linear(x.detach().to(at::kBFloat16), stand_in)));
  const at::Tensor grad = at::ones_like(out);
  out.backward(grad);
  EXPECT_TRUE(at::allclose(x.grad(), grad.to(at::kFloat).mm(stand_in.to(at::kFloat))));
}

}  // namespace
}  // namespace titan
