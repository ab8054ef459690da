#ifndef TITAN_LIB_UTIL_SAVED_JSON_FIELD_H_
#define TITAN_LIB_UTIL_SAVED_JSON_FIELD_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace titan {

// The JSON type a field read as T must have (nlohmann's get<int64_t> would take a float or a
// boolean too). Saved counts (steps, tokens) are never negative: an unsigned value past int64
// would wrap to one.
template <typename T>
struct JsonKind;
template <>
struct JsonKind<int64_t> {
  static constexpr char kName[] = "a non-negative 64-bit integer";
  static bool Matches(const nlohmann::json& value) {
    if (value.is_number_unsigned()) return value.get<uint64_t>() <= uint64_t{INT64_MAX};
    return value.is_number_integer() && value.get<int64_t>() >= 0;
  }
};
template <>
struct JsonKind<std::string> {
  static constexpr char kName[] = "a string";
  static bool Matches(const nlohmann::json& value) { return value.is_string(); }
};
template <>
struct JsonKind<std::vector<std::string>> {
  static constexpr char kName[] = "a list of strings";
  static bool Matches(const nlohmann::json& value) {
    return value.is_array() && std::all_of(value.begin(), value.end(),
                                           [](const nlohmann::json& v) { return v.is_string(); });
  }
};
template <>
struct JsonKind<nlohmann::json> {
  static constexpr char kName[] = "an object";
  static bool Matches(const nlohmann::json& value) { return value.is_object(); }
};

// The field at `key` ("train_state.step": object keys between dots) under `root` (called
// `root_name` in errors) of the file titan saved at `file`, as T; `if_absent`, where given, stands
// for a key the file lacks (written before it was). A missing key or another JSON type is DataLoss
// naming the file, the key and the type expected: nlohmann's type_error names neither.
template <typename T>
absl::StatusOr<T> SavedJsonField(const nlohmann::json& root, absl::string_view file,
                                 absl::string_view root_name, absl::string_view key,
                                 std::optional<T> if_absent = std::nullopt) {
  const nlohmann::json* value = &root;
  std::string at(root_name);
  const auto wrong_type = [&](absl::string_view expected) {
    return absl::DataLossError(
        absl::StrCat(file, ": ", at, ": expected ", expected, ", got ", value->type_name()));
  };
  for (absl::string_view part : absl::StrSplit(key, '.')) {
    if (!value->is_object()) return wrong_type(JsonKind<nlohmann::json>::kName);
    const auto it = value->find(std::string(part));
    absl::StrAppend(&at, ".", part);
    if (it == value->end()) {
      if (if_absent.has_value()) return *std::move(if_absent);
      return absl::DataLossError(absl::StrCat(file, ": ", at, " is missing"));
    }
    value = &*it;
  }
  if (!JsonKind<T>::Matches(*value)) return wrong_type(JsonKind<T>::kName);
  return value->get<T>();
}

}  // namespace titan

#endif  // TITAN_LIB_UTIL_SAVED_JSON_FIELD_H_
