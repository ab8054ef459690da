#include "lib/util/pcre2_code.h"

#include <string>

#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(CompilePcre2Test, CompilesAValidPatternUnderUtf) {
  absl::StatusOr<Pcre2Code> code = CompilePcre2("\\p{L}+", PCRE2_UCP);
  ASSERT_TRUE(code.ok()) << code.status();
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code->get(), nullptr);
  const std::string text = "12 \xC3\xA9t\xC3\xA9";  // "12 été": one match of 5 bytes at 3.
  ASSERT_EQ(pcre2_match(code->get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0,
                        match, nullptr),
            1);
  EXPECT_EQ(pcre2_get_ovector_pointer(match)[0], 3);
  EXPECT_EQ(pcre2_get_ovector_pointer(match)[1], 8);
  pcre2_match_data_free(match);
}

TEST(CompilePcre2Test, SaysWhyAndWhereAPatternDoesNotCompile) {
  EXPECT_EQ(std::string(CompilePcre2("ab(?<=a+)").status().message()),
            "lookbehind assertion is not fixed length at offset 2");
  EXPECT_EQ(std::string(CompilePcre2("a{2,1}").status().message()),
            "numbers out of order in {} quantifier at offset 5");
  // Not UTF-8: refused, since every pattern compiles with PCRE2_UTF.
  EXPECT_FALSE(CompilePcre2("\xFF").ok());
}

TEST(Pcre2ErrorMessageTest, GivesPcre2sTextForACode) {
  EXPECT_EQ(Pcre2ErrorMessage(PCRE2_ERROR_MATCHLIMIT), "match limit exceeded");
  EXPECT_EQ(Pcre2ErrorMessage(PCRE2_ERROR_NOMATCH), "no match");
  // PCRE2 writes nothing for a code it does not know.
  EXPECT_EQ(Pcre2ErrorMessage(-9999), "unknown PCRE2 error -9999");
}

}  // namespace
}  // namespace titan
