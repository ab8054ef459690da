#include "lib/util/short_text.h"

#include <string>

#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(ShortTextTest, ShortTextIsKeptWhole) {
  EXPECT_EQ(ShortText("abc", 3), "abc");
  EXPECT_EQ(QuotedShort("a\"b", 3), "\"a\\\"b\"");
}

TEST(ShortTextTest, LongTextKeepsItsEndsAndSize) {
  const std::string text = std::string(10, 'a') + std::string(1000000, 'x') + std::string(10, 'z');
  EXPECT_EQ(ShortText(text, 20), "aaaaaaaaaa...zzzzzzzzzz (1000020 bytes)");
  EXPECT_EQ(QuotedShort(text, 20), "\"aaaaaaaaaa...zzzzzzzzzz\" (1000020 bytes)");
}

// A cut inside a character would leave ill-formed UTF-8: the cut moves to the character's edge.
TEST(ShortTextTest, CutsOnCharacterBoundaries) {
  const std::string text = "a\xC3\xA9" + std::string(10, 'x') + "\xC3\xA9z";  // é: 2 bytes
  EXPECT_EQ(ShortText(text, 4), "a...z (16 bytes)");
  EXPECT_EQ(ShortText(text, 6), "a\xC3\xA9...\xC3\xA9z (16 bytes)");
}

// An error's place in a long text shows, not only the text's ends.
TEST(ShortTextTest, TextAroundKeepsTheTextAroundTheOffset) {
  const std::string text = std::string(1000, 'a') + "HERE" + std::string(1000, 'z');
  EXPECT_EQ(TextAround(text, 1002, 8), "...aaHEREzz... (2004 bytes)");
  EXPECT_EQ(TextAround(text, 0, 4), "aaaa... (2004 bytes)");
  EXPECT_EQ(TextAround(text, 5000, 4), "...zzzz (2004 bytes)");
  EXPECT_EQ(TextAround("abc", 1, 3), "abc");
  const std::string accents =  // é: 2 bytes, at 11 and 13.
      "x" + std::string(10, 'a') + "\xC3\xA9\xC3\xA9" + std::string(10, 'z');
  EXPECT_EQ(TextAround(accents, 13, 4), "...\xC3\xA9\xC3\xA9... (25 bytes)");
  EXPECT_EQ(TextAround(accents, 14, 4), "...\xC3\xA9z... (25 bytes)");  // Not inside an é.
}

TEST(JsonForMessageTest, ScalarsAsJsonSpellsThem) {
  EXPECT_EQ(JsonForMessage(nullptr), "null");
  EXPECT_EQ(JsonForMessage(true), "true");
  EXPECT_EQ(JsonForMessage(-7), "-7");
  EXPECT_EQ(JsonForMessage(2.5), "2.5");
  EXPECT_EQ(JsonForMessage("a\"b"), "\"a\\\"b\"");
  EXPECT_EQ(JsonForMessage(std::string(100, 'x'), 10), "\"xxxxx...xxxxx\" (100 bytes)");
}

TEST(JsonForMessageTest, ShortStructuresWholeLongOnesByTheirSize) {
  EXPECT_EQ(JsonForMessage(nlohmann::json::parse(R"([[1,2],{"a":"b"}])")),
            "array [[1,2],{\"a\":\"b\"}]");
  EXPECT_EQ(JsonForMessage(nlohmann::json::array()), "array []");
  EXPECT_EQ(JsonForMessage(nlohmann::json::parse("[1,2,3,4]"), 9), "array [1,2,3,4]");
  EXPECT_EQ(JsonForMessage(nlohmann::json::parse("[1,2,3,4]"), 8), "array of 4 elements");
  EXPECT_EQ(JsonForMessage(nlohmann::json{{"k", std::string(100, 'x')}}), "object of 1 elements");
  EXPECT_EQ(JsonForMessage(nlohmann::json{{std::string(100, 'k'), 1}}), "object of 1 elements");
}

// A million nested arrays would overflow the stack of a recursive walk to the bottom.
TEST(JsonForMessageTest, DeepNestingStopsAtTheBudget) {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  EXPECT_EQ(JsonForMessage(nlohmann::json::parse(deep)), "array of 1 elements");
}

}  // namespace
}  // namespace titan
