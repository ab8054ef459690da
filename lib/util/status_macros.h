#ifndef TITAN_LIB_UTIL_STATUS_MACROS_H_
#define TITAN_LIB_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Debian's abseil (20220623) does not export RETURN_IF_ERROR / ASSIGN_OR_RETURN.
#define TITAN_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    const absl::Status titan_status_ = (expr);      \
    if (!titan_status_.ok()) return titan_status_;  \
  } while (0)

#define TITAN_CONCAT_INNER_(a, b) a##b
#define TITAN_CONCAT_(a, b) TITAN_CONCAT_INNER_(a, b)
#define TITAN_ASSIGN_OR_RETURN(lhs, expr) \
  TITAN_ASSIGN_OR_RETURN_IMPL_(TITAN_CONCAT_(titan_statusor_, __LINE__), lhs, expr)
#define TITAN_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                 \
  if (!statusor.ok()) return statusor.status();           \
  lhs = std::move(statusor).value()

#endif  // TITAN_LIB_UTIL_STATUS_MACROS_H_
