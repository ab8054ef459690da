// The digits of Oniguruma's escapes (Ruby syntax, as HF tokenizers reads them) as PCRE2 reads
// them too.

#ifndef TITAN_LIB_TOKENIZER_ONIGURUMA_ESCAPE_H_
#define TITAN_LIB_TOKENIZER_ONIGURUMA_ESCAPE_H_

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"

namespace titan {

// The digits after an escape letter, as Oniguruma and PCRE2 both read them: a quantifier after
// them repeats the whole escape.
struct EscapeDigits {
  size_t size = 0;          // Of \xHH, an octal \0oo or \ooo, or a backreference \nn.
  std::optional<int> code;  // What \xHH or an octal escape stands for.
};

// The digits after the escape letter at `letter`; \nn is a backreference where n is under 10 or
// as many groups are open before it, else an octal escape (as in both).
EscapeDigits ReadEscapeDigits(absl::string_view pattern, size_t letter, int capture_groups);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_ONIGURUMA_ESCAPE_H_
