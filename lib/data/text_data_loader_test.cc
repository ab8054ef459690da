#include "lib/data/text_data_loader.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/data/test_util.h"
#include "lib/util/warning_collector.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Texts() {
  std::vector<std::string> texts;
  for (int i = 0; i < 40; ++i)
    texts.push_back(std::string(i % 13, static_cast<char>('a' + i % 26)));
  return texts;
}

std::unique_ptr<TextDataLoader> OpenLoader(const std::string& path, const Tokenizer* tokenizer,
                                           bool infinite, int dp_rank = 0, int dp_world_size = 1) {
  TextDatasetOptions options;
  options.path = path;
  options.seq_len = 6;
  options.infinite = infinite;
  options.dp_rank = dp_rank;
  options.dp_world_size = dp_world_size;
  absl::StatusOr<std::unique_ptr<PackedTextDataset>> dataset =
      PackedTextDataset::Open(options, tokenizer);
  EXPECT_TRUE(dataset.ok()) << dataset.status();
  if (!dataset.ok()) return nullptr;
  return std::make_unique<TextDataLoader>(std::move(*dataset));
}

// Row `row` of a [batch_size, seq_len] buffer.
std::vector<int64_t> Row(const std::vector<int64_t>& values, int64_t seq_len, int64_t row) {
  return std::vector<int64_t>(values.begin() + row * seq_len, values.begin() + (row + 1) * seq_len);
}

TEST(TextDataLoaderTest, BatchesAreShiftedWindowsAndTheLastOneMayBeShort) {
  const std::string path = FreshTestDir("batches") + "/a.jsonl";
  WriteTestFile(path, JsonLines(Texts()));
  const std::vector<std::vector<int32_t>> windows = ReferenceWindows(Texts(), 6);
  ASSERT_NE(windows.size() % 3, 0u);  // so the last batch is short
  ByteTokenizer tokenizer;
  std::unique_ptr<TextDataLoader> loader = OpenLoader(path, &tokenizer, /*infinite=*/false);
  ASSERT_NE(loader, nullptr);
  size_t next_window = 0;
  while (true) {
    absl::StatusOr<TokenBatch> batch = loader->NextBatch(3);
    if (!batch.ok()) {
      EXPECT_EQ(batch.status().code(), absl::StatusCode::kOutOfRange) << batch.status();
      break;
    }
    EXPECT_EQ(batch->batch_size, std::min<int64_t>(3, windows.size() - next_window));
    EXPECT_EQ(batch->seq_len, 6);
    ASSERT_EQ(batch->inputs.size(), batch->batch_size * 6);
    ASSERT_EQ(batch->labels.size(), batch->batch_size * 6);
    for (int64_t row = 0; row < batch->batch_size; ++row, ++next_window) {
      const std::vector<int32_t>& window = windows[next_window];
      EXPECT_EQ(Row(batch->inputs, 6, row), std::vector<int64_t>(window.begin(), window.end() - 1));
      EXPECT_EQ(Row(batch->labels, 6, row), std::vector<int64_t>(window.begin() + 1, window.end()));
    }
  }
  EXPECT_EQ(next_window, windows.size());
}

// For the same global batch, the rows of one step over the data-parallel ranks are the rows of
// one process's batch.
TEST(TextDataLoaderTest, RanksTogetherReadTheSingleProcessBatch) {
  const std::string path = FreshTestDir("dp") + "/a.jsonl";
  WriteTestFile(path, JsonLines(Texts()));
  ByteTokenizer tokenizer;
  std::unique_ptr<TextDataLoader> single = OpenLoader(path, &tokenizer, /*infinite=*/true);
  std::vector<std::unique_ptr<TextDataLoader>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.push_back(OpenLoader(path, &tokenizer, /*infinite=*/true, rank, 2));
  }
  for (int step = 0; step < 12; ++step) {
    absl::StatusOr<TokenBatch> global = single->NextBatch(4);
    ASSERT_TRUE(global.ok()) << global.status();
    std::vector<std::vector<int64_t>> expected, gathered;
    for (int64_t row = 0; row < 4; ++row) expected.push_back(Row(global->inputs, 6, row));
    for (const std::unique_ptr<TextDataLoader>& loader : ranks) {
      absl::StatusOr<TokenBatch> local = loader->NextBatch(2);
      ASSERT_TRUE(local.ok()) << local.status();
      for (int64_t row = 0; row < 2; ++row) gathered.push_back(Row(local->inputs, 6, row));
    }
    std::sort(expected.begin(), expected.end());
    std::sort(gathered.begin(), gathered.end());
    EXPECT_EQ(gathered, expected) << "step " << step;
  }
}

TEST(TextDataLoaderTest, StateRestoresTheNextBatches) {
  const std::string path = FreshTestDir("state") + "/a.jsonl";
  WriteTestFile(path, JsonLines(Texts()));
  ByteTokenizer tokenizer;
  std::unique_ptr<TextDataLoader> loader = OpenLoader(path, &tokenizer, /*infinite=*/true);
  for (int step = 0; step < 5; ++step) ASSERT_TRUE(loader->NextBatch(3).ok());
  const std::string saved = loader->StateDict().dump();
  std::unique_ptr<TextDataLoader> restored = OpenLoader(path, &tokenizer, /*infinite=*/true);
  ASSERT_TRUE(restored->LoadStateDict(nlohmann::json::parse(saved)).ok());
  for (int step = 0; step < 10; ++step) {
    absl::StatusOr<TokenBatch> expected = loader->NextBatch(3);
    absl::StatusOr<TokenBatch> actual = restored->NextBatch(3);
    ASSERT_TRUE(expected.ok() && actual.ok());
    EXPECT_EQ(actual->inputs, expected->inputs);
    EXPECT_EQ(actual->labels, expected->labels);
  }
}

TEST(TextDataLoaderTest, ReadAheadGivesTheSameBatchesStateAndEnd) {
  const std::string path = FreshTestDir("ahead") + "/a.jsonl";
  WriteTestFile(path, JsonLines(Texts()));
  ByteTokenizer tokenizer;
  for (bool infinite : {false, true}) {
    std::unique_ptr<TextDataLoader> plain = OpenLoader(path, &tokenizer, infinite);
    std::unique_ptr<TextDataLoader> ahead = OpenLoader(path, &tokenizer, infinite);
    ahead->StartReadAhead(3, /*depth=*/2);
    for (int step = 0; step < 30; ++step) {
      absl::StatusOr<TokenBatch> want = plain->NextBatch(3);
      absl::StatusOr<TokenBatch> got = ahead->NextBatch(3);
      ASSERT_EQ(got.status().code(), want.status().code()) << step;
      if (!want.ok()) break;  // both ended: OutOfRange, and again on every later call
      EXPECT_EQ(got->inputs, want->inputs) << step;
      // The state counts the batches returned, not the ones read ahead.
      EXPECT_EQ(ahead->StateDict(), plain->StateDict()) << step;
    }
    if (!infinite) {
      EXPECT_TRUE(absl::IsOutOfRange(ahead->NextBatch(3).status()));
    }
  }
  // Loading a state restarts the read-ahead from there.
  std::unique_ptr<TextDataLoader> ahead = OpenLoader(path, &tokenizer, /*infinite=*/true);
  ahead->StartReadAhead(3, 2);
  for (int step = 0; step < 4; ++step) ASSERT_TRUE(ahead->NextBatch(3).ok());
  const nlohmann::json saved = ahead->StateDict();
  absl::StatusOr<TokenBatch> next = ahead->NextBatch(3);
  ASSERT_TRUE(ahead->LoadStateDict(saved).ok());
  absl::StatusOr<TokenBatch> again = ahead->NextBatch(3);
  ASSERT_TRUE(next.ok() && again.ok());
  EXPECT_EQ(again->inputs, next->inputs);
  EXPECT_THAT(ahead->NextBatch(2).status().message(), HasSubstr("reading ahead batches of 3"));
}

TEST(TextDataLoaderTest, ABatchTooLargeForMemoryIsAnErrorOnTheReadAheadThreadToo) {
  const std::string path = FreshTestDir("huge") + "/a.jsonl";
  WriteTestFile(path, JsonLines(Texts()));
  ByteTokenizer tokenizer;
  std::unique_ptr<TextDataLoader> loader = OpenLoader(path, &tokenizer, /*infinite=*/true);
  const int64_t rows = int64_t{1} << 60;  // 6 x 2^60 tokens: bad_alloc on any machine
  loader->StartReadAhead(rows, 1);
  EXPECT_THAT(loader->NextBatch(rows).status().message(),
              HasSubstr("data loader: a batch of 1152921504606846976 x 6 tokens does not fit in "
                        "memory"));
}

TEST(TextDataLoaderTest, CheckNextBatchReportsBadDataWithoutTakingABatch) {
  const std::string dir = FreshTestDir("check_next");
  ByteTokenizer tokenizer;
  WriteTestFile(dir + "/good.jsonl", JsonLines(Texts()));
  std::unique_ptr<TextDataLoader> plain = OpenLoader(dir + "/good.jsonl", &tokenizer, true);
  std::unique_ptr<TextDataLoader> checked = OpenLoader(dir + "/good.jsonl", &tokenizer, true);
  checked->StartReadAhead(3, 2);
  EXPECT_TRUE(checked->CheckNextBatch().ok());
  EXPECT_TRUE(checked->CheckNextBatch().ok());
  absl::StatusOr<TokenBatch> want = plain->NextBatch(3);
  absl::StatusOr<TokenBatch> got = checked->NextBatch(3);
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_EQ(got->inputs, want->inputs);  // the checked batch is still the first
  EXPECT_EQ(checked->StateDict(), plain->StateDict());

  WriteTestFile(dir + "/bad.jsonl", "{\"text\": 5}\n");
  std::unique_ptr<TextDataLoader> bad = OpenLoader(dir + "/bad.jsonl", &tokenizer, true);
  bad->StartReadAhead(3, 2);
  EXPECT_THAT(bad->CheckNextBatch().message(), HasSubstr("bad.jsonl:1"));
}

TEST(TextDataLoaderTest, RejectsANonPositiveBatchSize) {
  const std::string path = FreshTestDir("size") + "/a.jsonl";
  WriteTestFile(path, JsonLines(Texts()));
  ByteTokenizer tokenizer;
  std::unique_ptr<TextDataLoader> loader = OpenLoader(path, &tokenizer, /*infinite=*/true);
  EXPECT_THAT(loader->NextBatch(0).status().message(), HasSubstr("at least 1, got 0"));
}

TEST(TextDataLoaderTest, ReLoopingIsLoggedWhenItsBatchIsReturnedNotWhenReadAhead) {
  // Read ahead before a resume, a tiny dataset's passes were logged and then discarded.
  const std::string path = FreshTestDir("reloop") + "/a.jsonl";
  WriteTestFile(path, JsonLines({"abcde"}));  // BOS, 5 bytes, EOS: one window of seq_len 6
  ByteTokenizer tokenizer;
  WarningCollector collector;
  std::unique_ptr<TextDataLoader> loader = OpenLoader(path, &tokenizer, /*infinite=*/true);
  ASSERT_NE(loader, nullptr);
  loader->StartReadAhead(1, /*depth=*/2);
  // Time for the thread to read both batches ahead; the second starts pass 1.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_THAT(collector.warnings(), IsEmpty());
  ASSERT_TRUE(loader->NextBatch(1).ok());
  EXPECT_THAT(collector.warnings(), IsEmpty());
  ASSERT_TRUE(loader->NextBatch(1).ok());
  EXPECT_THAT(collector.warnings(), ElementsAre(HasSubstr("is being re-looped: starting epoch 1")));

  const nlohmann::json state = loader->StateDict();
  std::unique_ptr<TextDataLoader> resumed = OpenLoader(path, &tokenizer, /*infinite=*/true);
  ASSERT_NE(resumed, nullptr);
  resumed->StartReadAhead(1, /*depth=*/2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(resumed->LoadStateDict(state).ok());
  ASSERT_TRUE(resumed->NextBatch(1).ok());
  EXPECT_THAT(collector.warnings(),
              ElementsAre(HasSubstr("starting epoch 1"), HasSubstr("starting epoch 2")));

  // Without read-ahead too.
  std::unique_ptr<TextDataLoader> direct = OpenLoader(path, &tokenizer, /*infinite=*/true);
  ASSERT_NE(direct, nullptr);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(direct->NextBatch(1).ok());
  EXPECT_THAT(collector.warnings(),
              ElementsAre(HasSubstr("epoch 1"), HasSubstr("epoch 2"), HasSubstr("epoch 1"),
                          HasSubstr("epoch 2"), HasSubstr("epoch 4")));
}

}  // namespace
}  // namespace titan
