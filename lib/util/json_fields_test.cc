#include "lib/util/json_fields.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

// Expected texts are Python's: str(72), repr(1e23), repr(0.1), ... as a Python verifier spells
// them.
TEST(JsonScalarTextTest, SpellsNumbersAsPythonDoes) {
  const auto text = [](const char* json) { return JsonScalarText(nlohmann::json::parse(json)); };
  EXPECT_EQ(text("72.0"), "72");
  EXPECT_EQ(text("72"), "72");
  EXPECT_EQ(text("-3.0"), "-3");
  EXPECT_EQ(text("0.1"), "0.1");
  EXPECT_EQ(text("2.5e-7"), "2.5e-07");
  EXPECT_EQ(text("100000000000000000000000.0"), "1e+23");
  EXPECT_EQ(text("9007199254740993.0"), "9007199254740992.0");  // 2^53: past exact integers
  EXPECT_EQ(text("\"a b\""), "a b");
  EXPECT_EQ(text("true"), "true");
}

// Plain decimals, as the numeric verifier's "-?[0-9.,]+" can match: no exponent, the digits as
// written.
TEST(JsonNumberDecimalTextTest, SpellsNumbersWithoutExponent) {
  const auto text = [](const char* json) { return *JsonNumberDecimalText(json); };
  EXPECT_EQ(text("1.5e-7"), "0.00000015");
  EXPECT_EQ(text("-2.5e-7"), "-0.00000025");
  EXPECT_EQ(text("72.0"), "72");
  EXPECT_EQ(text("72.50"), "72.5");
  EXPECT_EQ(text("72"), "72");
  EXPECT_EQ(text("-3"), "-3");
  EXPECT_EQ(text("0.1"), "0.1");
  EXPECT_EQ(text("0.00012"), "0.00012");
  EXPECT_EQ(text("123456.789"), "123456.789");
  EXPECT_EQ(text("0.0"), "0");
  EXPECT_EQ(text("-0.0"), "0");  // as the integer -0, which nlohmann reads as 0
  EXPECT_EQ(text("0e5000"), "0");
  EXPECT_EQ(text("100e-2"), "1");
  EXPECT_EQ(text("1E+2"), "100");
  EXPECT_EQ(text("1e21"), "1000000000000000000000");
  EXPECT_EQ(text("1e23"), "100000000000000000000000");  // not the double's 99999999999999991611392
  EXPECT_EQ(text("18446744073709551615"), "18446744073709551615");  // uint64's largest, exact
  EXPECT_EQ(text("5e-324"), "0." + std::string(323, '0') + "5");
}

// Digits a double does not keep (it holds 15 to 17 significant ones) stay as written.
TEST(JsonNumberDecimalTextTest, KeepsDigitsBeyondADouble) {
  const auto text = [](const char* json) { return *JsonNumberDecimalText(json); };
  EXPECT_EQ(text("123456789012345678901234567890"), "123456789012345678901234567890");
  EXPECT_EQ(text("-123456789012345678901234567890.0"), "-123456789012345678901234567890");
  EXPECT_EQ(text("1.23456789012345678901234567890e29"), "123456789012345678901234567890");
  EXPECT_EQ(text("0.1000000000000000000001"), "0.1000000000000000000001");
  EXPECT_EQ(text("9007199254740993.0"), "9007199254740993");  // 2^53 + 1: a double's is ...992
}

// An exponent that would spell more than kMaxDecimalExponentZeros zeros is refused, not written
// out (1e-99999999 would be 100 MB of text).
TEST(JsonNumberDecimalTextTest, RefusesExponentsBeyondTheZerosLimit) {
  EXPECT_EQ(JsonNumberDecimalText("1e1000").value(), "1" + std::string(1000, '0'));
  EXPECT_EQ(JsonNumberDecimalText("1e-1000").value(), "0." + std::string(999, '0') + "1");
  for (const char* number : {"1e1001", "1e-1002", "1e-99999999", "-1e-99999999999999999999999"}) {
    EXPECT_EQ(JsonNumberDecimalText(number).status().message(),
              "spelled without its exponent it takes over 1000 zeros")
        << number;
  }
}

}  // namespace
}  // namespace titan
