#include "lib/hub/repo_glob.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

bool Matches(const std::string& glob, const std::string& path) {
  absl::StatusOr<RepoGlob> compiled = RepoGlob::Compile(glob);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  return compiled.ok() && compiled->Matches(path);
}

TEST(RepoGlobTest, TrailingSlashTakesTheFolder) {
  EXPECT_TRUE(Matches("original/", "original/params.json"));
  EXPECT_TRUE(Matches("original/", "original/sub/x.pth"));
  EXPECT_FALSE(Matches("original/", "original"));
  EXPECT_FALSE(Matches("original/", "config.json"));
}

TEST(RepoGlobTest, CaretIsLiteralInBracketsAndOnlyBangNegates) {
  EXPECT_TRUE(Matches("[^c]*.json", "^x.json"));
  EXPECT_TRUE(Matches("[^c]*.json", "config.json"));
  EXPECT_FALSE(Matches("[^c]*.json", "tokenizer.json"));
  EXPECT_FALSE(Matches("[!c]*.json", "config.json"));
  EXPECT_TRUE(Matches("[!c]*.json", "tokenizer.json"));
}

TEST(RepoGlobTest, BackslashIsASlashNotAnEscape) {
  EXPECT_TRUE(Matches("original\\*", "original/params.json"));
  EXPECT_FALSE(Matches("\\*.json", "*.json"));
}

TEST(RepoGlobTest, StarCrossesSlashesAndCaseCounts) {
  EXPECT_TRUE(Matches("*.json", "original/params.json"));
  EXPECT_FALSE(Matches("*.JSON", "config.json"));
  EXPECT_TRUE(Matches("?é*", "xé.json"));
}

TEST(RepoGlobTest, ClassesAsFnmatchTranslates) {
  EXPECT_TRUE(Matches("[a-c]", "b"));
  EXPECT_FALSE(Matches("[c-a]", "b"));        // a reversed range matches nothing
  EXPECT_TRUE(Matches("[!c-a]", "b"));        // ... so its negation matches anything
  EXPECT_TRUE(Matches("[[:alpha:]]", ":]"));  // no POSIX classes: "[" ":" "a" ... then "]"
  EXPECT_TRUE(Matches("[a-c-e]", "-"));       // a "-" after a range is literal
  EXPECT_FALSE(Matches("[a-c-e]", "d"));
  EXPECT_TRUE(Matches("[", "["));  // an unclosed "[" is literal
  EXPECT_TRUE(Matches("a|b&&c", "a|b&&c"));
}

TEST(RepoGlobTest, RefusesAGlobThatIsNotUtf8) {
  // Named with its bytes escaped, so that the message stays printable text.
  EXPECT_THAT(std::string(RepoGlob::Compile("a\xff").status().message()),
              HasSubstr("glob \"a\\xff\": UTF-8 error"));
}

}  // namespace
}  // namespace titan
