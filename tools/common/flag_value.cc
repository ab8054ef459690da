#include "tools/common/flag_value.h"

#include "absl/strings/str_cat.h"

namespace titan {

std::string MissingValueError(absl::string_view flag, absl::string_view next,
                              absl::string_view equals_form, absl::string_view any_value) {
  if (next.empty()) return absl::StrCat(flag, ": missing value (", equals_form, ")");
  return absl::StrCat(flag, ": missing value (the next argument, ", next, ", is a flag; ",
                      equals_form, " takes ", any_value, ")");
}

}  // namespace titan
