#include "lib/util/json_file.h"

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

// A syntax error names the file, says "invalid JSON" and where: the line and column.
TEST(JsonFileTest, ASyntaxErrorNamesTheFileLineAndColumn) {
  const std::string path = TempPath("config.json");
  ASSERT_TRUE(
      WriteFileAtomically(path, "{\"model_type\": \"llama\",,\n \"hidden_size\": 64}").ok());
  const absl::StatusOr<nlohmann::json> parsed = ReadJsonFile(path);
  ASSERT_FALSE(parsed.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
  const std::string message(parsed.status().message());
  EXPECT_THAT(message, StartsWith(path + ": invalid JSON: "));
  EXPECT_THAT(message, HasSubstr("parse error at line 1, column 24"));

  ASSERT_TRUE(WriteFileAtomically(path, "{\"model_type\": \"llama\"}").ok());
  EXPECT_EQ(*ReadJsonFile(path), nlohmann::json({{"model_type", "llama"}}));
  EXPECT_THAT(std::string(ReadJsonFile(TempPath("absent.json")).status().message()),
              HasSubstr("absent.json"));
}

TEST(JsonFileTest, ParsesTextThroughACallbackInTheChosenType) {
  int keys = 0;
  const absl::StatusOr<nlohmann::ordered_json> parsed = ParseJsonText<nlohmann::ordered_json>(
      "{\"b\": 1, \"a\": 2}", "text",
      [&](int, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json&) {
        keys += event == nlohmann::ordered_json::parse_event_t::key;
        return true;
      });
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->begin().key(), "b");
  EXPECT_EQ(keys, 2);
  EXPECT_THAT(std::string(ParseJsonText("[1,", "text").status().message()),
              StartsWith("text: invalid JSON: "));
}

}  // namespace
}  // namespace titan
