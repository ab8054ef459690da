#ifndef TITAN_LIB_UTIL_JSON_FIELDS_H_
#define TITAN_LIB_UTIL_JSON_FIELDS_H_

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace titan {

// Reads `key` of `object` into `out` when present and not null; a wrong type is an error naming
// `source` and the key (nlohmann's own exception does not say which file or key).
template <typename T>
absl::Status ReadOptionalField(const nlohmann::json& object, const char* key,
                               const std::string& source, T& out) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  try {
    out = it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": ", key, ": unexpected ", it->type_name(), " (", e.what(), ")"));
  }
  return absl::OkStatus();
}

// As ReadOptionalField, but a missing or null key is an error.
template <typename T>
absl::Status ReadRequiredField(const nlohmann::json& object, const char* key,
                               const std::string& source, T& out) {
  if (!object.contains(key) || object.at(key).is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": missing key \"", key, "\""));
  }
  return ReadOptionalField(object, key, source, out);
}

// A JSON scalar as a person writes it: a string's own text, an integral float below 2^53 (exact in
// a double) without ".0" (72.0 reads "72", 10000.0 "10000"), another float in its shortest
// round-trip spelling as Python's repr (1e+23, not 9.999999999999999e+22), anything else as JSON
// spells it.
inline std::string JsonScalarText(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_number_float()) {
    const double number = value.get<double>();
    if (number == std::trunc(number) && std::fabs(number) < 9007199254740992.0) {
      return absl::StrCat(static_cast<int64_t>(number));
    }
    char text[32];
    const std::to_chars_result written = std::to_chars(text, text + sizeof(text), number);
    if (written.ec == std::errc()) {
      std::string spelled(text, written.ptr);
      // Python keeps a float's ".0" where it spells no exponent: 2^53 reads 9007199254740992.0.
      if (spelled.find_first_of(".e") == std::string::npos) spelled += ".0";
      return spelled;
    }
  }
  return value.dump();
}

// A JSON number as plain decimal text, never with an exponent: an integer as written, a float in
// its shortest round-trip digits (1.5e-7 reads "0.00000015", 72.0 "72", 1e21
// "1000000000000000000000").
inline std::string JsonNumberDecimalText(const nlohmann::json& number) {
  if (!number.is_number_float()) return number.dump();
  // to_chars gives the shortest digits; only the exponent's expansion is written here, as its
  // chars_format::fixed spells a large double's exact binary value (1e23: 99999999999999991611392).
  char text[32];
  const std::to_chars_result written =
      std::to_chars(text, text + sizeof(text), number.get<double>(), std::chars_format::scientific);
  const std::string spelled(text, written.ptr);  // "-1.5e-07"
  const size_t e = spelled.find('e');
  const bool negative = spelled[0] == '-';
  std::string digits = spelled.substr(negative, e - negative);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  int exponent = 0;
  std::from_chars(spelled.data() + e + 1 + (spelled[e + 1] == '+'), spelled.data() + spelled.size(),
                  exponent);
  const int point = exponent + 1;  // digits before the point
  std::string decimal;
  if (point <= 0) {
    decimal = absl::StrCat("0.", std::string(-point, '0'), digits);
  } else if (point >= static_cast<int>(digits.size())) {
    decimal = absl::StrCat(digits, std::string(point - digits.size(), '0'));
  } else {
    decimal = absl::StrCat(digits.substr(0, point), ".", digits.substr(point));
  }
  return negative ? "-" + decimal : decimal;
}

}  // namespace titan

#endif  // TITAN_LIB_UTIL_JSON_FIELDS_H_
