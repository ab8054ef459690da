#ifndef TITAN_TOOLS_COMMON_FLAG_VALUE_H_
#define TITAN_TOOLS_COMMON_FLAG_VALUE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace titan {

// Every tool's refusal of a flag given as "--flag VALUE" without its VALUE, whichever parser read
// it: `next` is the argument after `flag`, a flag that this spelling would otherwise take as the
// value, or empty when `flag` is the last argument. `equals_form` is the spelling that takes any
// value ("--output=FILE"), `any_value` what it takes ("any file name").
//   "--output: missing value (the next argument, --json, is a flag; --output=FILE takes any file
//   name)", or "--output: missing value (--output=FILE)" when nothing follows.
std::string MissingValueError(absl::string_view flag, absl::string_view next,
                              absl::string_view equals_form,
                              absl::string_view any_value = "any value");

}  // namespace titan

#endif  // TITAN_TOOLS_COMMON_FLAG_VALUE_H_
