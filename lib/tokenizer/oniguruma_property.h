// Oniguruma's Unicode properties (\p{NAME} in HF tokenizers' regexes) in PCRE2's spelling.

#ifndef TITAN_LIB_TOKENIZER_ONIGURUMA_PROPERTY_H_
#define TITAN_LIB_TOKENIZER_ONIGURUMA_PROPERTY_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// Oniguruma's \w, the Unicode word characters (Alphabetic, marks, decimal digits, connector
// punctuation), as the body of a PCRE2 class: PCRE2 10.42's \w under UCP is only [\p{L}\p{N}_],
// which splits combining marks off words and keeps other numbers (①) in them.
inline constexpr absl::string_view kOnigWordBody = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc})";
// A bare \w, \W, \b or \p{Word} (not one inside [...]) reads code points below U+0100 from
// Oniguruma's Latin-1 table, which also counts these as word characters: superscripts ²³¹ and
// fractions ¼½¾.
inline constexpr absl::string_view kOnigLatin1Word = R"(\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})";

// The PCRE2 spelling of Oniguruma's `escape` (\p or \P) with `name` between its braces, inside
// [...] or not, or why it has none.
absl::StatusOr<std::string> OnigurumaPropertyInPcre2(absl::string_view escape,
                                                     absl::string_view name, bool in_class);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_ONIGURUMA_PROPERTY_H_
