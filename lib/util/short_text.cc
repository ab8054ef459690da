#include "lib/util/short_text.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

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

// Appends `value`'s compact JSON to `out`; false, stopping there, once `out` passes `max_bytes`
// (so the recursion is at most max_bytes deep: every level adds a bracket).
bool AppendBounded(const nlohmann::json& value, size_t max_bytes, std::string* out) {
  if (out->size() > max_bytes) return false;
  if (value.is_structured()) {
    out->push_back(value.is_array() ? '[' : '{');
    bool first = true;
    for (const auto& [key, element] : value.items()) {
      if (!first) out->push_back(',');
      first = false;
      if (value.is_object()) {
        if (key.size() > max_bytes) return false;
        absl::StrAppend(out, JsonText(nlohmann::json(key)), ":");
      }
      if (!AppendBounded(element, max_bytes, out)) return false;
    }
    out->push_back(value.is_array() ? ']' : '}');
  } else if (value.is_string() && value.get_ref<const std::string&>().size() > max_bytes) {
    return false;
  } else {
    out->append(JsonText(value));
  }
  return out->size() <= max_bytes;
}

}  // namespace

std::string ShortText(absl::string_view text, size_t max_bytes) {
  return absl::StrCat(CutMiddle(text, max_bytes), SizeIfCut(text, max_bytes));
}

std::string TextAround(absl::string_view text, size_t offset, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  const size_t at = std::min(offset, text.size());
  size_t start = std::min(at - std::min(at, max_bytes / 2), text.size() - max_bytes);
  size_t end = start + max_bytes;
  // Cut on UTF-8 character boundaries, inside the window.
  while (start < end && (text[start] & 0xC0) == 0x80) ++start;
  while (end > start && end < text.size() && (text[end] & 0xC0) == 0x80) --end;
  return absl::StrCat(start > 0 ? "..." : "", text.substr(start, end - start),
                      end < text.size() ? "..." : "", SizeIfCut(text, max_bytes));
}

std::string QuotedShort(absl::string_view text, size_t max_bytes) {
  const std::string quoted = JsonText(nlohmann::json(CutMiddle(text, max_bytes)));
  return absl::StrCat(quoted, SizeIfCut(text, max_bytes));
}

std::string JsonForMessage(const nlohmann::json& value, size_t max_bytes) {
  if (value.is_string()) return QuotedShort(value.get_ref<const std::string&>(), max_bytes);
  if (!value.is_structured()) return JsonText(value);
  std::string text;
  if (AppendBounded(value, max_bytes, &text)) return absl::StrCat(value.type_name(), " ", text);
  return absl::StrCat(value.type_name(), " of ", value.size(), " elements");
}

}  // namespace titan
