#include "lib/hub/repo_glob.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

TEST(RepoGlobTest, SaysWhereInTheGlobAsTypedTheBadByteIs) {
  // Each bad byte follows syntax that the regex spells longer ("**/" becomes ".*\/"), so an
  // offset counted in the regex would be larger.
  for (const auto& [glob, offset] : std::vector<std::pair<std::string, int>>{
           {"a\xff", 1}, {"**/\xff", 3}, {"*.j?\xfe", 4}, {"[a-c]x\xc3(", 6}, {"o\\\x80", 2}}) {
    const std::string message(RepoGlob::Compile(glob).status().message());
    EXPECT_THAT(message, HasSubstr(absl::StrCat("at byte offset ", offset, " of the glob")))
        << message;
    EXPECT_THAT(message, Not(HasSubstr(" at offset "))) << message;
  }
}

TEST(RepoGlobTest, AGlobWhoseRegexIsTooLargeIsRefusedWithoutARegexOffset) {
  std::string glob;
  for (int i = 0; i < 20000; ++i) glob += "*a";
  const std::string message(RepoGlob::Compile(glob).status().message());
  EXPECT_THAT(message, HasSubstr("\": the regex it translates to does not compile: regular "
                                 "expression is too large"));
  EXPECT_THAT(message, Not(HasSubstr("offset")));
}

}  // namespace
}  // namespace titan
