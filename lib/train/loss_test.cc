#include "lib/train/loss.h"

#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(LossTest, CrossEntropySumSkipsIgnoredLabelsAndEqualsTheMeanTimesCount) {
  at::manual_seed(0);
  Batch batch;
  at::Tensor logits = at::randn({2, 5, 11});
  batch.labels = at::randint(11, {2, 5}, at::kLong);
  batch.labels[0][1] = kIgnoreIndex;
  batch.labels[1][4] = kIgnoreIndex;
  const at::Tensor sum = CrossEntropySum()(logits, batch);
  const at::Tensor mean = at::cross_entropy_loss(logits.view({10, 11}), batch.labels.view({10}));
  EXPECT_EQ(CountedTokens(batch.labels), 8);
  EXPECT_NEAR(sum.item<double>(), mean.item<double>() * 8, 1e-5);
  // Ignored rows contribute nothing, whatever their logits.
  logits[0][1].fill_(100);
  EXPECT_NEAR(CrossEntropySum()(logits, batch).item<double>(), sum.item<double>(), 1e-5);
}

TEST(LossTest, DocumentIdsStartAtEachBos) {
  const at::Tensor tokens = at::tensor({7, 1, 5, 6, 1, 9}, at::kLong).view({1, 6});
  const at::Tensor ids = DocumentIds(tokens, /*bos_id=*/1);
  EXPECT_TRUE(at::equal(ids, at::tensor({0, 1, 1, 1, 2, 2}, at::kLong).view({1, 6})));
}

}  // namespace
}  // namespace titan
