#ifndef TITAN_LIB_UTIL_JSON_FILE_H_
#define TITAN_LIB_UTIL_JSON_FILE_H_

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace titan {

// `text` (the contents of `source`) parsed as JSON, through `callback` if given (nlohmann's
// parser_callback_t). A syntax error is "<source>: invalid JSON: <nlohmann's message>", which
// names the line and column. JsonT: nlohmann::json, or nlohmann::ordered_json to keep key order.
template <typename JsonT = nlohmann::json>
absl::StatusOr<JsonT> ParseJsonText(absl::string_view text, const std::string& source,
                                    typename JsonT::parser_callback_t callback = nullptr) {
  try {
    return JsonT::parse(text.begin(), text.end(), std::move(callback));
  } catch (const typename JsonT::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": invalid JSON: ", e.what()));
  }
}

// The file at `path`, read and parsed as ParseJsonText does; errors name `path`.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_JSON_FILE_H_
