#ifndef TITAN_LIB_UTIL_STATUS_CONTEXT_H_
#define TITAN_LIB_UTIL_STATUS_CONTEXT_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace titan {

// `status` with `context` (a config key, a tensor's name) before its message; the code is kept,
// so a caller still tells NotFound from InvalidArgument.
inline absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace titan

#endif  // TITAN_LIB_UTIL_STATUS_CONTEXT_H_
