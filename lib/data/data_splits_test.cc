#include "lib/data/data_splits.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

MATCHER_P2(IsSplit, name, files, "") {
  return arg.name == name && arg.files == std::vector<std::string>(files);
}

using Files = std::vector<std::string>;

// The expectations are what datasets 5.2.0's get_data_patterns resolves on these layouts.
TEST(InferDataSplitsTest, SplitNamesInFileNames) {
  // The hunter's layouts: a hub-style folder, and a copy of c4's English files.
  EXPECT_THAT(InferDataSplits({"test-00000-of-00001.jsonl", "train-00000-of-00002.jsonl",
                               "train-00001-of-00002.jsonl"}),
              ElementsAre(IsSplit("train", Files{"train-00000-of-00002.jsonl",
                                                 "train-00001-of-00002.jsonl"}),
                          IsSplit("test", Files{"test-00000-of-00001.jsonl"})));
  EXPECT_THAT(InferDataSplits({"c4-train.00000-of-00002.json.gz", "c4-train.00001-of-00002.json.gz",
                               "c4-validation.00000-of-00001.json.gz"}),
              ElementsAre(IsSplit("train", Files{"c4-train.00000-of-00002.json.gz",
                                                 "c4-train.00001-of-00002.json.gz"}),
                          IsSplit("validation", Files{"c4-validation.00000-of-00001.json.gz"})));
  // assets/default_corpus.
  EXPECT_THAT(InferDataSplits({"train.jsonl", "validation.jsonl"}),
              ElementsAre(IsSplit("train", Files{"train.jsonl"}),
                          IsSplit("validation", Files{"validation.jsonl"})));
  // Synonyms, separators (digits, '_', ' ') and folders below.
  EXPECT_THAT(InferDataSplits({"other.jsonl", "sub/dev.jsonl", "sub/en_val.json", "train1.jsonl",
                               "training set.jsonl", "x-eval-y.jsonl"}),
              ElementsAre(IsSplit("train", Files{"train1.jsonl", "training set.jsonl"}),
                          IsSplit("validation", Files{"sub/dev.jsonl", "sub/en_val.json"}),
                          IsSplit("test", Files{"x-eval-y.jsonl"})));
}

TEST(InferDataSplitsTest, NamesThatMarkNoSplit) {
  // Case counts, a keyword must stand apart, and a file's name needs a separator after it.
  EXPECT_THAT(InferDataSplits({"Train.jsonl", "mytrain.jsonl", "trainx.jsonl", "validations.jsonl",
                               "a.jsonl", "_keep/z.jsonl", "eval"}),
              IsEmpty());
}

TEST(InferDataSplitsTest, FolderNamesComeFirst) {
  // Once a folder names a split, file names no longer do.
  EXPECT_THAT(InferDataSplits({"train-test.jsonl", "train/x.jsonl", "valid/y.jsonl"}),
              ElementsAre(IsSplit("train", Files{"train/x.jsonl"}),
                          IsSplit("validation", Files{"valid/y.jsonl"})));
  EXPECT_THAT(InferDataSplits({"my train.jsonl", "val/e.jsonl"}),
              ElementsAre(IsSplit("validation", Files{"val/e.jsonl"})));
  EXPECT_THAT(InferDataSplits({"en-test/a.jsonl", "x/c4-train/b.jsonl", "trainx/c.jsonl"}),
              ElementsAre(IsSplit("train", Files{"x/c4-train/b.jsonl"}),
                          IsSplit("test", Files{"en-test/a.jsonl"})));
}

TEST(InferDataSplitsTest, ShardsInDataFolderNameTheirSplits) {
  // data/{split}-NNNNN-of-NNNNN.*: any split name, taken as is; other files are left out.
  EXPECT_THAT(InferDataSplits({"data/dev-00000-of-00001.jsonl", "data/train-00000-of-00001.jsonl",
                               "data/x/train-00000-of-00001.jsonl", "z.jsonl"}),
              ElementsAre(IsSplit("train", Files{"data/train-00000-of-00001.jsonl"}),
                          IsSplit("dev", Files{"data/dev-00000-of-00001.jsonl"})));
}

}  // namespace
}  // namespace titan
