// HF tokenizers' regexes (Oniguruma, Ruby syntax) as PCRE2 patterns.

#ifndef TITAN_LIB_TOKENIZER_ONIGURUMA_REGEX_H_
#define TITAN_LIB_TOKENIZER_ONIGURUMA_REGEX_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// Translates a tokenizer.json regex, written for HF tokenizers' Oniguruma (Ruby syntax), into a
// PCRE2 pattern that matches the same text. Constructs whose meaning differs and that have no
// PCRE2 spelling are refused: a refused tokenizer is better than silently different ids.
absl::StatusOr<std::string> OnigurumaToPcre2(absl::string_view pattern);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_ONIGURUMA_REGEX_H_
