// Oniguruma's quantifiers (Ruby syntax, as HF tokenizers reads them) as PCRE2 spells them.

#ifndef TITAN_LIB_TOKENIZER_ONIGURUMA_QUANTIFIER_H_
#define TITAN_LIB_TOKENIZER_ONIGURUMA_QUANTIFIER_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// The index of the } closing an Oniguruma interval ({n}, {n,}, {,n}, {n,m}) opened at `open`, or
// npos where that { starts none (Oniguruma then reads it as a literal {).
size_t OnigIntervalEnd(absl::string_view pattern, size_t open);

// One quantifier as Oniguruma's parser reads it: *, + or ? with the lazy ? or possessive + that
// belongs to it, or an interval with its lazy ?. Ruby syntax gives {n} no lazy mark and an
// interval no possessive one: a quantifier after them is another quantifier, as after any
// quantifier, which repeats the quantified item as a whole.
struct OnigQuantifier {
  size_t end = 0;  // Just past it in the pattern.
  // PCRE2 quantifiers applied in turn: each after the first repeats the item with the ones before
  // it, wrapped in (?:...).
  std::vector<std::string> pcre2;
};

// The quantifier at `start` (a *, + or ?, or a { that opens an interval), or an error saying why
// PCRE2 cannot repeat as Oniguruma does ("the interval {0,70000} is not supported (...)").
absl::StatusOr<OnigQuantifier> ReadOnigQuantifier(absl::string_view pattern, size_t start);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_ONIGURUMA_QUANTIFIER_H_
