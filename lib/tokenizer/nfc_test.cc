#include "lib/tokenizer/nfc.h"

#include <string>

#include "gtest/gtest.h"

namespace titan {
namespace {

// Expected values are Python's unicodedata.normalize("NFC", ...), which PyPI tokenizers agrees
// with on these (tests/tokenizer:parity_test compares every table entry with tokenizers).
TEST(NfcTest, ComposesDecomposedLetters) {
  EXPECT_EQ(NfcNormalize("e\u0301"), "\u00e9");
  EXPECT_EQ(NfcNormalize("cafe\u0301 nai\u0308ve"), "caf\u00e9 na\u00efve");
  EXPECT_EQ(NfcNormalize("U\u0308\u0304"), "\u01d5");       // Ü then macron: two steps
  EXPECT_EQ(NfcNormalize("\u1100\u1161\u11a8"), "\uac01");  // Hangul L V T
}

TEST(NfcTest, ReordersMarksByClassBeforeComposing) {
  // Dot below (220) goes before the dot above (230); then s + dot below + dot above is U+1E69.
  EXPECT_EQ(NfcNormalize("s\u0307\u0323"), "\u1e69");
  // A mark of the same class in between blocks the second one: only the first composes.
  EXPECT_EQ(NfcNormalize("a\u0301\u0301"), "\u00e1\u0301");
}

TEST(NfcTest, SingletonsAndExclusionsStayDecomposed) {
  EXPECT_EQ(NfcNormalize("\u212b"), "\u00c5");        // ANGSTROM SIGN
  EXPECT_EQ(NfcNormalize("\u2126"), "\u03a9");        // OHM SIGN
  EXPECT_EQ(NfcNormalize("\u0958"), "\u0915\u093c");  // excluded from composition
  EXPECT_EQ(NfcNormalize("\u0915\u093c"), "\u0915\u093c");
}

TEST(NfcTest, LeavesNormalizedAndOtherTextAlone) {
  for (const std::string text : {"", "plain ASCII", "\u00e9\u00fc", "\u65e5\u672c\u8a9e",
                                 "\U0001F44D\U0001F3FD", "\uac01\uac00"}) {
    EXPECT_EQ(NfcNormalize(text), text);
  }
}

TEST(NfcTest, KeepsBytesThatAreNotUtf8) {
  EXPECT_EQ(NfcNormalize("\xff"
                         "e\u0301\xc3"),
            "\xff\u00e9\xc3");
  // A stray byte between a letter and a mark blocks their composition.
  EXPECT_EQ(NfcNormalize("e\x80\u0301"), "e\x80\u0301");
  EXPECT_EQ(NfcNormalize("\xed\xa0\x80\u0301"), "\xed\xa0\x80\u0301");  // a surrogate's bytes
}

TEST(NfcTest, LeadingMarkComposesWithNothing) {
  EXPECT_EQ(NfcNormalize("\u0301e"), "\u0301e");
  EXPECT_EQ(NfcNormalize("\u0323\u0301a\u0301"), "\u0323\u0301\u00e1");
}

}  // namespace
}  // namespace titan
