#include "lib/util/redact.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace titan {

std::string RedactUrl(absl::string_view url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == absl::string_view::npos) return std::string(url);
  const size_t host_start = scheme_end + 3;
  const size_t authority_end = std::min(url.find_first_of("/?#", host_start), url.size());
  const size_t at = url.substr(0, authority_end).rfind('@');
  if (at == absl::string_view::npos || at < host_start) return std::string(url);
  return absl::StrCat(url.substr(0, host_start), "***", url.substr(at));
}

std::string RedactUrlsIn(absl::string_view text) {
  std::string redacted;
  size_t copied = 0;  // text before it is in `redacted`
  for (size_t scheme_end = text.find("://"); scheme_end != absl::string_view::npos;
       scheme_end = text.find("://", copied)) {
    size_t url_start = scheme_end;
    while (url_start > copied && absl::ascii_isalnum(text[url_start - 1])) --url_start;
    const size_t url_end = std::min(text.find_first_of(" \t\r\n\"'<>", scheme_end), text.size());
    absl::StrAppend(&redacted, text.substr(copied, url_start - copied),
                    RedactUrl(text.substr(url_start, url_end - url_start)));
    copied = url_end;
  }
  absl::StrAppend(&redacted, text.substr(copied));
  return redacted;
}

}  // namespace titan
