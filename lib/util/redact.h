#ifndef TITAN_LIB_UTIL_REDACT_H_
#define TITAN_LIB_UTIL_REDACT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace titan {

// `url` with its userinfo (user:password@) replaced by "***@", for messages: HF_ENDPOINT, a
// scorer's command may carry credentials.
std::string RedactUrl(absl::string_view url);

// `text` (a server's error message, say) with RedactUrl applied to every URL in it.
std::string RedactUrlsIn(absl::string_view text);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_REDACT_H_
