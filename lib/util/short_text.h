#ifndef TITAN_LIB_UTIL_SHORT_TEXT_H_
#define TITAN_LIB_UTIL_SHORT_TEXT_H_

// Bounded quotes of user data for error messages: a hostile or broken input (a 300 MB line) must
// not become a message of the same size.

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace titan {

// `text` whole when at most `max_bytes` long, else its first and last max_bytes / 2 bytes (cut on
// UTF-8 character boundaries) around "..." and then its size: "abc...xyz (1000000 bytes)".
std::string ShortText(absl::string_view text, size_t max_bytes = 60);

// `text` whole when at most `max_bytes` long, else the max_bytes around byte `offset` (an error's
// place in it), "..." marking each cut, then its size: "...xy(?<=a+)zw... (1000000 bytes)".
std::string TextAround(absl::string_view text, size_t offset, size_t max_bytes = 60);

// As ShortText, the kept text quoted as a JSON string (ill-formed UTF-8 replaced):
// "\"abc...xyz\" (1000000 bytes)".
std::string QuotedShort(absl::string_view text, size_t max_bytes = 60);

// A JSON value for an error message: a string as QuotedShort, another scalar as JSON spells it,
// an array or object by its type and its JSON when that is at most `max_bytes` long, else by its
// type and size ("array [1,2]", "object of 3000 elements"). Never dumps a whole value: one could
// be huge, or nested deep enough to overflow the stack of nlohmann's recursive dump().
std::string JsonForMessage(const nlohmann::json& value, size_t max_bytes = 60);

// `value` as JSON text (`indent` as dump()'s), bytes that are not UTF-8 replaced by U+FFFD: dump()
// throws on them, and paths and user strings are bytes. JsonT: nlohmann::json or ordered_json.
template <typename JsonT>
std::string JsonText(const JsonT& value, int indent = -1) {
  return value.dump(indent, ' ', false, JsonT::error_handler_t::replace);
}

}  // namespace titan

#endif  // TITAN_LIB_UTIL_SHORT_TEXT_H_
