#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_entries.h"
#include "gtest/gtest.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

std::string CorpusDirectory(const std::string& target) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"),
                      "/fuzz/corpus/", target);
}

class CorpusTest : public testing::TestWithParam<FuzzTarget> {};

TEST_P(CorpusTest, EveryFileParsesOrIsRejectedWithoutCrashing) {
  const FuzzTarget& target = GetParam();
  const std::string directory = CorpusDirectory(target.name);
  absl::StatusOr<std::vector<std::string>> files = ListDirectory(directory);
  ASSERT_TRUE(files.ok()) << files.status();
  int valid = 0, invalid = 0;
  for (const std::string& file : *files) {
    absl::StatusOr<std::string> bytes = ReadFile(absl::StrCat(directory, "/", file));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    const absl::Status status = target.parse(*bytes);
    if (absl::StartsWith(file, "valid-")) {
      ++valid;
      EXPECT_TRUE(status.ok()) << file << ": " << status;
    } else if (absl::StartsWith(file, "invalid-") || absl::StartsWith(file, "crash-")) {
      ++invalid;
      EXPECT_FALSE(status.ok()) << file << " was accepted";
      EXPECT_FALSE(status.message().empty()) << file;
    }
  }
  EXPECT_GT(valid, 0) << directory << " has no valid-* seed";
  EXPECT_GT(invalid, 0) << directory << " has no invalid-* seed";
}

INSTANTIATE_TEST_SUITE_P(Targets, CorpusTest, testing::ValuesIn(FuzzTargets()),
                         [](const testing::TestParamInfo<FuzzTarget>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace titan
