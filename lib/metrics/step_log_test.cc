#include "lib/metrics/step_log.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

constexpr char kEarlier[] = "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2.25}\n";

// A fresh folder `name` holding an earlier run's log `contents`; returns the log's path.
std::string EarlierLog(const std::string& name, const std::string& contents) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::filesystem::create_directories(folder);
  const std::string path = folder + "/log.jsonl";
  EXPECT_TRUE(WriteFileAtomically(path, contents).ok());
  return path;
}

StepLogStart Starting(int64_t resumed_step, bool restart, const std::string& run_id) {
  StepLogStart start;
  start.resumed_step = resumed_step;
  start.restart = restart;
  start.run_id = run_id;
  return start;
}

std::string Contents(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  return text.ok() ? *text : "<" + text.status().ToString() + ">";
}

TEST(StepLogTest, AFreshRunSetsTheEarlierRunsRowsAside) {
  const std::string path = EarlierLog("fresh", kEarlier);
  absl::StatusOr<StepLog> log = StepLog::Start(path, Starting(-1, false, "r1"));
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->rows_path(), path);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(Contents(path + ".abandoned-r1"), kEarlier);
  EXPECT_FALSE(log->commit_pending());
}

TEST(StepLogTest, AFreshRunKeepsAnEmptyEarlierFile) {
  const std::string path = EarlierLog("fresh_empty", "");
  ASSERT_TRUE(StepLog::Start(path, Starting(-1, false, "r1")).ok());
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".abandoned-r1"));
}

TEST(StepLogTest, AResumedRunDropsTheRowsOfTheStepsItRedoes) {
  const std::string path = EarlierLog("resumed", kEarlier);
  absl::StatusOr<StepLog> log = StepLog::Start(path, Starting(1, false, "r1"));
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->rows_path(), path);
  EXPECT_EQ(Contents(path), "{\"step\":1,\"loss\":2.5}\n");
  EXPECT_FALSE(std::filesystem::exists(path + ".abandoned-r1"));
}

TEST(StepLogTest, AResumedRunDropsALastRowCutShortAndKeepsOneMissingOnlyItsNewline) {
  // The disk filled up in the middle of step 2's row.
  std::string path = EarlierLog("cut_short", "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2.");
  ASSERT_TRUE(StepLog::Start(path, Starting(2, false, "")).ok());
  EXPECT_EQ(Contents(path), "{\"step\":1,\"loss\":2.5}\n");
  path = EarlierLog("no_newline", "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2.25}");
  ASSERT_TRUE(StepLog::Start(path, Starting(2, false, "")).ok());
  EXPECT_EQ(Contents(path), kEarlier);
}

TEST(StepLogTest, ARestartTakesOverTheFileOnlyWhenItCommits) {
  const std::string path = EarlierLog("restart", kEarlier);
  absl::StatusOr<StepLog> log = StepLog::Start(path, Starting(-1, true, "r7"));
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->rows_path(), path + ".restart-r7");
  ASSERT_TRUE(WriteFileAtomically(log->rows_path(), "{\"step\":1}\n").ok());
  EXPECT_EQ(Contents(path), kEarlier);  // a run that dies now leaves the history as it was
  ASSERT_TRUE(log->Commit().ok());
  EXPECT_FALSE(log->commit_pending());
  EXPECT_EQ(log->rows_path(), path);
  EXPECT_EQ(Contents(path), "{\"step\":1}\n");
  EXPECT_EQ(Contents(path + ".abandoned-r7"), kEarlier);
  EXPECT_FALSE(std::filesystem::exists(path + ".restart-r7"));
}

TEST(StepLogTest, TheNextRunSetsAsideTheRowsOfARestartThatDiedBeforeItsFirstSave) {
  const std::string path = EarlierLog("restart_died", kEarlier);
  ASSERT_TRUE(WriteFileAtomically(path + ".restart-r7", "{\"step\":1}\n").ok());
  absl::StatusOr<StepLog> log = StepLog::Start(path, Starting(2, false, "r8"));
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(Contents(path), kEarlier);
  EXPECT_FALSE(std::filesystem::exists(path + ".restart-r7"));
  EXPECT_EQ(Contents(path + ".abandoned-r7"), "{\"step\":1}\n");
}

TEST(StepLogTest, ARestartThatWroteNoRowsStillSetsTheEarlierFileAsideAtItsCommit) {
  const std::string path = EarlierLog("restart_no_rows", kEarlier);
  absl::StatusOr<StepLog> log = StepLog::Start(path, Starting(-1, true, "r7"));
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_TRUE(log->Commit().ok());
  EXPECT_EQ(log->rows_path(), path);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(Contents(path + ".abandoned-r7"), kEarlier);
}

TEST(StepLogTest, ARunThatStartsOverNeedsARunId) {
  const absl::StatusOr<StepLog> log =
      StepLog::Start(EarlierLog("no_id", kEarlier), Starting(-1, false, ""));
  EXPECT_EQ(log.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace titan
