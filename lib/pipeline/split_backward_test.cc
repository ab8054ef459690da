// SplitBackward against one plain backward on a pipeline stage's part of a small decoder: the
// input gradient from InputGrad, then every weight gradient from WeightGrads, must equal
// backward()'s. Tolerance 1e-6 relative (fp32): the same kernels run; only the order in which a
// tensor's gradient contributions are added can differ.
#include "lib/pipeline/split_backward.h"

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/model/decoder.h"
#include "lib/model/tiny_transformer_args.h"
#include "lib/parallel/parallelize.h"

namespace titan {
namespace {

TransformerArgs SmallArgs() {
  TransformerArgs args = TinyTransformerArgs(32, 40, 16, /*qwen=*/false, /*n_layers=*/3);
  args.qk_norm = true;
  return args;
}

// A later stage: layers 1 and 2, the final norm and head.
struct Stage {
  std::unique_ptr<Decoder> model;
  std::vector<at::Tensor> leaves;  // what gradients accumulate into
};

// With `flat`, every parameter becomes a view of one leaf, as FSDP's gathered weights all come
// out of one node: the gradients of a block's weights meet below the input's path.
Stage MakeStage(bool flat, const std::string& ac_mode) {
  at::manual_seed(0);
  Stage stage;
  stage.model = std::make_unique<Decoder>(SmallArgs(), at::TensorOptions().dtype(at::kFloat),
                                          DecoderPart{1, 3, false, true});
  stage.model->Materialize(at::TensorOptions().dtype(at::kFloat));
  stage.model->InitWeights();
  EXPECT_TRUE(ApplyActivationCheckpointing(*stage.model, ac_mode, "1").ok());
  std::vector<ParamRef> params = stage.model->NamedParameters();
  if (!flat) {
    for (const ParamRef& p : params) stage.leaves.push_back(*p.tensor);
    return stage;
  }
  std::vector<at::Tensor> pieces;
  for (const ParamRef& p : params) pieces.push_back(p.tensor->detach().reshape(-1));
  at::Tensor leaf = at::cat(pieces).requires_grad_(true);
  int64_t offset = 0;
  for (const ParamRef& p : params) {
    const int64_t n = p.tensor->numel();
    *p.tensor = leaf.narrow(0, offset, n).view(p.tensor->sizes());
    offset += n;
  }
  stage.leaves = {leaf};
  return stage;
}

at::Tensor Loss(Decoder& model, const at::Tensor& input, const at::Tensor& labels) {
  const BatchContext context = model.PrepareBatch(input.size(0), input.size(1), {});
  const at::Tensor logits = model.Head(model.RunLayers(input, context));
  return at::cross_entropy_loss(logits.flatten(0, 1), labels.flatten(), {}, at::Reduction::Sum);
}

double MaxRelDiff(const at::Tensor& got, const at::Tensor& want) {
  return ((got - want).abs().max() / want.abs().max()).item<double>();
}

void ExpectSplitEqualsWhole(bool flat, const std::string& ac_mode) {
  SCOPED_TRACE(std::string(flat ? "flat" : "separate") + " weights, AC " + ac_mode);
  Stage stage = MakeStage(flat, ac_mode);
  const at::Tensor x = at::randn({2, 5, 32});
  const at::Tensor labels = at::randint(40, {2, 5}, at::kLong);

  at::Tensor input = x.clone().requires_grad_(true);
  Loss(*stage.model, input, labels).backward();
  const at::Tensor want_input = input.grad().clone();
  std::vector<at::Tensor> want;
  for (at::Tensor& leaf : stage.leaves) {
    want.push_back(leaf.grad().clone());
    leaf.mutable_grad() = at::Tensor();
  }

  input = x.clone().requires_grad_(true);
  SplitBackward split(Loss(*stage.model, input, labels), at::Tensor(), input, stage.leaves);
  EXPECT_LE(MaxRelDiff(split.InputGrad(), want_input), 1e-6);
  if (ac_mode == "none") {
    // Before W nothing reaches the weights.
    for (const at::Tensor& leaf : stage.leaves) EXPECT_FALSE(leaf.grad().defined());
  }
  split.WeightGrads();
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_TRUE(stage.leaves[i].grad().defined()) << i;
    EXPECT_LE(MaxRelDiff(stage.leaves[i].grad(), want[i]), 1e-6) << i;
  }
}

TEST(SplitBackwardTest, InputThenWeightGradientsEqualOneBackward) {
  ExpectSplitEqualsWhole(/*flat=*/false, "none");
}

TEST(SplitBackwardTest, WeightsMeetingInOneNodeGetTheirGradientsOnce) {
  ExpectSplitEqualsWhole(/*flat=*/true, "none");
}

TEST(SplitBackwardTest, RecomputedBlocksGetTheirWeightGradientsDuringTheInputHalf) {
  ExpectSplitEqualsWhole(/*flat=*/false, "full");
  ExpectSplitEqualsWhole(/*flat=*/true, "selective");
}

}  // namespace
}  // namespace titan
