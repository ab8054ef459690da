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

}  // namespace
}  // namespace titan
