#include "lib/util/short_text.h"

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

// `text`'s head and tail around "...", when longer than `max_bytes`; else `text`.
std::string CutMiddle(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  // Cut on UTF-8 character boundaries (a continuation byte is 10xxxxxx).
  size_t head = max_bytes / 2, tail = text.size() - max_bytes / 2;
  while (head > 0 && (text[head] & 0xC0) == 0x80) --head;
  while (tail < text.size() && (text[tail] & 0xC0) == 0x80) ++tail;
  return absl::StrCat(text.substr(0, head), "...", text.substr(tail));
}

std::string SizeIfCut(absl::string_view text, size_t max_bytes) {
  return text.size() <= max_bytes ? "" : absl::StrCat(" (", text.size(), " bytes)");
}

}  // namespace

std::string ShortText(absl::string_view text, size_t max_bytes) {
  return absl::StrCat(CutMiddle(text, max_bytes), SizeIfCut(text, max_bytes));
}

std::string QuotedShort(absl::string_view text, size_t max_bytes) {
  const std::string quoted = nlohmann::json(CutMiddle(text, max_bytes))
                                 .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return absl::StrCat(quoted, SizeIfCut(text, max_bytes));
}

}  // namespace titan
