#ifndef TITAN_LIB_UTIL_JSON_FIELDS_H_
#define TITAN_LIB_UTIL_JSON_FIELDS_H_

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
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

// At most this many zeros JsonNumberDecimalText writes for an exponent: every double's plain
// spelling fits (5e-324 takes 323), and 1e-99999999, which a double reads as 0, does not become
// 100 MB of text.
inline constexpr int64_t kMaxDecimalExponentZeros = 1000;

// A JSON number, given as written (`number`: JSON's number syntax), as plain decimal text, never
// with an exponent and with every digit written: 1.5e-7 reads "0.00000015", 72.0 "72", 1e21
// "1000000000000000000000", 123456789012345678901234567890 itself (a double would keep 17 of its
// digits). Trailing fraction zeros and the point they leave go (72.50 reads "72.5"). An exponent
// that would write more than kMaxDecimalExponentZeros zeros is an error.
inline absl::StatusOr<std::string> JsonNumberDecimalText(absl::string_view number) {
  const bool negative = absl::ConsumePrefix(&number, "-");
  const size_t e = number.find_first_of("eE");
  const absl::string_view mantissa = number.substr(0, e);
  const auto too_many_zeros = [] {
    return absl::InvalidArgumentError(absl::StrCat("spelled without its exponent it takes over ",
                                                   kMaxDecimalExponentZeros, " zeros"));
  };
  int64_t exponent = 0;
  if (e != absl::string_view::npos) {
    absl::string_view spelled = number.substr(e + 1);
    absl::ConsumePrefix(&spelled, "+");
    const std::from_chars_result read =
        std::from_chars(spelled.data(), spelled.data() + spelled.size(), exponent);
    // One past a billion is refused outright: its point would move past any line's digits.
    if (read.ec != std::errc() || exponent > 1000000000 || exponent < -1000000000) {
      return too_many_zeros();
    }
  }
  const size_t dot = mantissa.find('.');
  const absl::string_view whole = mantissa.substr(0, dot);
  const absl::string_view fraction =
      dot == absl::string_view::npos ? absl::string_view() : mantissa.substr(dot + 1);
  const std::string digits = absl::StrCat(whole, fraction);
  // -0 and -0.0 alike (nlohmann reads the integer -0 as 0): a zero has no sign.
  if (digits.find_first_not_of('0') == std::string::npos) return "0";
  const int64_t point = static_cast<int64_t>(whole.size()) + exponent;  // digits before the point
  const int64_t zeros =
      point < 0 ? -point : std::max<int64_t>(0, point - static_cast<int64_t>(digits.size()));
  if (zeros > kMaxDecimalExponentZeros) return too_many_zeros();
  std::string integer, decimals;
  if (point <= 0) {
    integer = "0";
    decimals = absl::StrCat(std::string(-point, '0'), digits);
  } else if (point >= static_cast<int64_t>(digits.size())) {
    integer = absl::StrCat(digits, std::string(point - digits.size(), '0'));
  } else {
    integer = digits.substr(0, point);
    decimals = digits.substr(point);
  }
  integer.erase(0, std::min(integer.find_first_not_of('0'), integer.size() - 1));
  decimals.erase(std::min(decimals.size(), decimals.find_last_not_of('0') + 1));
  return absl::StrCat(negative ? "-" : "", integer, decimals.empty() ? "" : ".", decimals);
}

}  // namespace titan

#endif  // TITAN_LIB_UTIL_JSON_FIELDS_H_
