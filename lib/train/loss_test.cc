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
  const at::Tensor tokens = at::tensor({7, 2, 1, 5, 6, 2, 1, 9}, at::kLong).view({1, 8});
  const at::Tensor ids = DocumentIds(tokens, /*bos_id=*/1, /*eos_id=*/2);
  EXPECT_TRUE(at::equal(ids, at::tensor({0, 0, 1, 1, 1, 1, 2, 2}, at::kLong).view({1, 8})));
}

TEST(LossTest, DocumentIdsWithoutBosStartAfterEachEos) {
  // Qwen's layout packs "text EOS text EOS": the same split as with BOS, one token earlier.
  const at::Tensor tokens = at::tensor({7, 2, 5, 6, 2, 9, 2, 2}, at::kLong).view({2, 4});
  const at::Tensor ids = DocumentIds(tokens, /*bos_id=*/std::nullopt, /*eos_id=*/2);
  EXPECT_TRUE(at::equal(ids, at::tensor({0, 0, 1, 1, 0, 1, 1, 2}, at::kLong).view({2, 4})));
}

TEST(LossTest, SplitBatchCutsEveryFieldIntoEqualMicrobatches) {
  Batch batch;
  batch.tokens = at::arange(24, at::kLong).view({4, 6});
  batch.labels = batch.tokens + 1;
  batch.extra["advantages"] = at::arange(24, at::kFloat).view({4, 6});
  const std::vector<Batch> parts = SplitBatch(batch, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(at::equal(parts[1].tokens, batch.tokens.narrow(0, 2, 2)));
  EXPECT_TRUE(at::equal(parts[1].labels, batch.labels.narrow(0, 2, 2)));
  EXPECT_TRUE(at::equal(parts[0].extra.at("advantages"), batch.extra["advantages"].narrow(0, 0, 2)));
  EXPECT_FALSE(parts[0].positions.defined());
  EXPECT_FALSE(parts[1].documents.defined());
}

}  // namespace
}  // namespace titan
