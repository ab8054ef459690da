#ifndef TITAN_LIB_UTIL_TORCH_ERRORS_H_
#define TITAN_LIB_UTIL_TORCH_ERRORS_H_

#include <c10/util/Exception.h>

#include <exception>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace titan {

// `body()` (an absl::Status or StatusOr), with what LibTorch throws turned into an InternalError
// "LibTorch error: ...": a c10::Error without its C++ backtrace, and the std::runtime_error its
// scalar conversions throw (an lr past float's range). Library entry points run their work in it
// so a tool ends with one line and its exit code, not std::terminate.
template <typename Body>
auto CatchTorchErrors(Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("LibTorch error: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("LibTorch error: ", e.what()));
  }
}

}  // namespace titan

#endif  // TITAN_LIB_UTIL_TORCH_ERRORS_H_
