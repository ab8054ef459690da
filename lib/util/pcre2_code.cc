#include "lib/util/pcre2_code.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace titan {

absl::StatusOr<Pcre2Code> CompilePcre2(absl::string_view pattern, uint32_t options,
                                       size_t* offset_out) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    if (offset_out != nullptr) *offset_out = error_offset;
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat(reinterpret_cast<const char*>(message), " at offset ", error_offset));
  }
  return Pcre2Code(code);
}

}  // namespace titan
