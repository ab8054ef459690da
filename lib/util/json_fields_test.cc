#include "lib/util/json_fields.h"

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

// Plain decimals, as the numeric verifier's "-?[0-9.,]+" can match: no exponent, the shortest
// digits.
TEST(JsonNumberDecimalTextTest, SpellsNumbersWithoutExponent) {
  const auto text = [](const char* json) {
    return JsonNumberDecimalText(nlohmann::json::parse(json));
  };
  EXPECT_EQ(text("1.5e-7"), "0.00000015");
  EXPECT_EQ(text("-2.5e-7"), "-0.00000025");
  EXPECT_EQ(text("72.0"), "72");
  EXPECT_EQ(text("72"), "72");
  EXPECT_EQ(text("-3"), "-3");
  EXPECT_EQ(text("0.1"), "0.1");
  EXPECT_EQ(text("123456.789"), "123456.789");
  EXPECT_EQ(text("0.0"), "0");
  EXPECT_EQ(text("1e21"), "1000000000000000000000");
  EXPECT_EQ(text("1e23"), "100000000000000000000000");  // not the double's 99999999999999991611392
  EXPECT_EQ(text("18446744073709551615"), "18446744073709551615");  // uint64's largest, exact
  EXPECT_EQ(text("5e-324"), "0." + std::string(323, '0') + "5");
}

}  // namespace
}  // namespace titan
