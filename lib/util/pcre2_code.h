// Compiling PCRE2 patterns (8-bit code units, UTF-8) with PCRE2's own error message.

#ifndef TITAN_LIB_UTIL_PCRE2_CODE_H_
#define TITAN_LIB_UTIL_PCRE2_CODE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pcre2.h"

namespace titan {

struct Pcre2CodeFree {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
using Pcre2Code = std::unique_ptr<pcre2_code, Pcre2CodeFree>;

// Compiles `pattern` with PCRE2_UTF and `options` (with PCRE2_NEVER_UTF among them: bytes, for
// text that need not be UTF-8), or says why not: PCRE2's message and the byte offset in `pattern`
// where it stopped, as "lookbehind assertion is not fixed length at offset 9"; that offset also
// in *offset_out where given.
absl::StatusOr<Pcre2Code> CompilePcre2(absl::string_view pattern, uint32_t options = 0,
                                       size_t* offset_out = nullptr);

// PCRE2's text for `error_code` (a compile error or a negative pcre2_match result), as "match
// limit exceeded"; "unknown PCRE2 error <code>" for a code PCRE2 has no text for.
std::string Pcre2ErrorMessage(int error_code);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_PCRE2_CODE_H_
