#include "lib/data/data_splits.h"

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

MATCHER_P2(IsSplit, name, files, "") {
  return arg.name == name && arg.files == std::vector<std::string>(files);
}

using Files = std::vector<std::string>;

std::vector<DataSplit> Splits(const Files& files) {
  absl::StatusOr<std::vector<DataSplit>> splits = InferDataSplits(files);
  EXPECT_TRUE(splits.ok()) << splits.status();
  return splits.ok() ? *splits : std::vector<DataSplit>{};
}

// The expectations are what datasets 5.2.0's get_data_patterns resolves on these layouts.
TEST(InferDataSplitsTest, SplitNamesInFileNames) {
  // The hunter's layouts: a hub-style folder, and a copy of c4's English files.
  EXPECT_THAT(Splits({"test-00000-of-00001.jsonl", "train-00000-of-00002.jsonl",
                      "train-00001-of-00002.jsonl"}),
              ElementsAre(IsSplit("train", Files{"train-00000-of-00002.jsonl",
                                                 "train-00001-of-00002.jsonl"}),
                          IsSplit("test", Files{"test-00000-of-00001.jsonl"})));
  EXPECT_THAT(Splits({"c4-train.00000-of-00002.json.gz", "c4-train.00001-of-00002.json.gz",
                      "c4-validation.00000-of-00001.json.gz"}),
              ElementsAre(IsSplit("train", Files{"c4-train.00000-of-00002.json.gz",
                                                 "c4-train.00001-of-00002.json.gz"}),
                          IsSplit("validation", Files{"c4-validation.00000-of-00001.json.gz"})));
  // assets/default_corpus.
  EXPECT_THAT(Splits({"train.jsonl", "validation.jsonl"}),
              ElementsAre(IsSplit("train", Files{"train.jsonl"}),
                          IsSplit("validation", Files{"validation.jsonl"})));
  // Synonyms, separators (digits, '_', ' ') and folders below.
  EXPECT_THAT(Splits({"other.jsonl", "sub/dev.jsonl", "sub/en_val.json", "train1.jsonl",
                      "training set.jsonl", "x-eval-y.jsonl"}),
              ElementsAre(IsSplit("train", Files{"train1.jsonl", "training set.jsonl"}),
                          IsSplit("validation", Files{"sub/dev.jsonl", "sub/en_val.json"}),
                          IsSplit("test", Files{"x-eval-y.jsonl"})));
}

TEST(InferDataSplitsTest, NamesThatMarkNoSplit) {
  // Case counts, a keyword must stand apart, and a file's name needs a separator after it.
  EXPECT_THAT(Splits({"Train.jsonl", "mytrain.jsonl", "trainx.jsonl", "validations.jsonl",
                      "a.jsonl", "_keep/z.jsonl", "eval"}),
              IsEmpty());
}

TEST(InferDataSplitsTest, FolderNamesComeFirst) {
  // Once a folder names a split, file names no longer do.
  EXPECT_THAT(Splits({"train-test.jsonl", "train/x.jsonl", "valid/y.jsonl"}),
              ElementsAre(IsSplit("train", Files{"train/x.jsonl"}),
                          IsSplit("validation", Files{"valid/y.jsonl"})));
  EXPECT_THAT(Splits({"my train.jsonl", "val/e.jsonl"}),
              ElementsAre(IsSplit("validation", Files{"val/e.jsonl"})));
  EXPECT_THAT(Splits({"en-test/a.jsonl", "x/c4-train/b.jsonl", "trainx/c.jsonl"}),
              ElementsAre(IsSplit("train", Files{"x/c4-train/b.jsonl"}),
                          IsSplit("test", Files{"en-test/a.jsonl"})));
}

TEST(InferDataSplitsTest, ShardsInDataFolderNameTheirSplits) {
  // data/{split}-NNNNN-of-NNNNN.*: any split name, taken as is; other files are left out.
  EXPECT_THAT(Splits({"data/dev-00000-of-00001.jsonl", "data/train-00000-of-00001.jsonl",
                      "data/x/train-00000-of-00001.jsonl", "z.jsonl"}),
              ElementsAre(IsSplit("train", Files{"data/train-00000-of-00001.jsonl"}),
                          IsSplit("dev", Files{"data/dev-00000-of-00001.jsonl"})));
  // A shard's name need not be UTF-8 after its split.
  EXPECT_THAT(Splits({"data/t-00001-of-00002-r\xe9sum\xe9.x", "data/t-00000-of-00002.x"}),
              ElementsAre(IsSplit(
                  "t", Files{"data/t-00001-of-00002-r\xe9sum\xe9.x", "data/t-00000-of-00002.x"})));
  EXPECT_THAT(Splits({"data/a.b-00000-of-00001.x", "data/c-00001-of-00002.tar.gz"}),
              ElementsAre(IsSplit("a.b", Files{"data/a.b-00000-of-00001.x"}),
                          IsSplit("c", Files{"data/c-00001-of-00002.tar.gz"})));
  // The glob wants a dot after the shard numbers: these are split by their names' keywords.
  EXPECT_THAT(
      Splits({"data/train-00000-of-00001", "data/train.jsonl"}),
      ElementsAre(IsSplit("train", Files{"data/train-00000-of-00001", "data/train.jsonl"})));
}

TEST(InferDataSplitsTest, RefusesShardSplitNamesHfRefuses) {
  absl::StatusOr<std::vector<DataSplit>> splits =
      InferDataSplits({"data/train-00000-of-00001.jsonl", "data/my train-00000-of-00001.jsonl"});
  EXPECT_THAT(splits.status().message(), HasSubstr("data/my train-00000-of-00001.jsonl: split "
                                                   "name \"my train\" is not word characters"));
  // HF's split is the longest name before -NNNNN-of-NNNN, so a name holding two shard marks
  // names a split with a '-', which it refuses.
  splits = InferDataSplits({"data/a-00000-of-00001-00000-of-00001.x"});
  EXPECT_THAT(splits.status().message(), HasSubstr("split name \"a-00000-of-00001\""));
  // Python reads a name that is not UTF-8 with surrogates, which \w does not match.
  splits = InferDataSplits({"data/validaci\xf3n-00000-of-00001.jsonl"});
  EXPECT_THAT(splits.status().message(), HasSubstr("split name \"validaci\xf3n\""));
  splits = InferDataSplits({"data/-00000-of-00001.jsonl"});
  EXPECT_THAT(splits.status().message(), HasSubstr("names no split"));
}

TEST(SplitNamePatternsTest, NamesHfKeywords) {
  EXPECT_EQ(SplitNamePatterns("train"), "train*, training*");
  EXPECT_EQ(SplitNamePatterns("validation"), "validation*, valid*, dev*, val*");
  EXPECT_EQ(SplitNamePatterns("dev"), "");
}

}  // namespace
}  // namespace titan
