#include "lib/util/pcre2_code.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace titan {

std::string Pcre2ErrorMessage(int error_code) {
  PCRE2_UCHAR message[256];
  // PCRE2_ERROR_BADDATA: an unknown code, for which PCRE2 writes nothing.
  if (pcre2_get_error_message(error_code, message, sizeof(message)) == PCRE2_ERROR_BADDATA) {
    return absl::StrCat("unknown PCRE2 error ", error_code);
  }
  return reinterpret_cast<const char*>(message);
}

absl::StatusOr<Pcre2Code> CompilePcre2(absl::string_view pattern, uint32_t options,
                                       size_t* offset_out) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   (options & PCRE2_NEVER_UTF ? 0 : PCRE2_UTF) | options,
                                   &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    if (offset_out != nullptr) *offset_out = error_offset;
    return absl::InvalidArgumentError(
        absl::StrCat(Pcre2ErrorMessage(error_code), " at offset ", error_offset));
  }
  return Pcre2Code(code);
}

}  // namespace titan
