#include "lib/tokenizer/oniguruma_quantifier.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace titan {
namespace {

constexpr int64_t kOnigMaxRepeat = 100000;  // ONIG_MAX_REPEAT_NUM.
constexpr int64_t kPcre2MaxRepeat = 65535;

// An exact count over PCRE2's limit as two PCRE2 counts whose product it is, X{a*b} being
// (?:X{a}){b}, the outer one smallest (PCRE2 copies a repeated group); empty where none is.
std::vector<std::string> ExactCountInPcre2(int64_t count) {
  for (int64_t outer = (count + kPcre2MaxRepeat - 1) / kPcre2MaxRepeat; outer <= kPcre2MaxRepeat;
       ++outer) {
    if (count % outer == 0) {
      return {absl::StrCat("{", count / outer, "}"), absl::StrCat("{", outer, "}")};
    }
  }
  return {};
}

}  // namespace

size_t OnigIntervalEnd(absl::string_view pattern, size_t open) {
  size_t i = open + 1;
  const auto digits = [&] {
    const size_t start = i;
    while (i < pattern.size() && absl::ascii_isdigit(pattern[i])) ++i;
    return i > start;
  };
  const bool low = digits();
  bool high = false;
  if (i < pattern.size() && pattern[i] == ',') {
    ++i;
    high = digits();
  }
  if (!(low || high) || i >= pattern.size() || pattern[i] != '}') return absl::string_view::npos;
  return i;
}

absl::StatusOr<OnigQuantifier> ReadOnigQuantifier(absl::string_view pattern, size_t start) {
  const auto next_is = [&](size_t i, char c) { return i < pattern.size() && pattern[i] == c; };
  if (pattern[start] != '{') {  // *, + or ?, then a lazy ? or a possessive +, as in PCRE2.
    const size_t end = start + 1 + (next_is(start + 1, '?') || next_is(start + 1, '+'));
    return OnigQuantifier{.end = end, .pcre2 = {std::string(pattern.substr(start, end - start))}};
  }
  const size_t close = OnigIntervalEnd(pattern, start);
  const absl::string_view interval = pattern.substr(start, close + 1 - start);
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("the interval ", interval, " is not supported (", why, ")"));
  };
  const absl::string_view bounds = interval.substr(1, interval.size() - 2);
  const size_t comma = bounds.find(',');
  const absl::string_view low_text = bounds.substr(0, comma);
  const absl::string_view high_text =
      comma == absl::string_view::npos ? low_text : bounds.substr(comma + 1);
  int64_t low = 0;    // {,n} is {0,n}.
  int64_t high = -1;  // {n,} has no upper bound.
  if ((!low_text.empty() && !(absl::SimpleAtoi(low_text, &low) && low <= kOnigMaxRepeat)) ||
      (!high_text.empty() && !(absl::SimpleAtoi(high_text, &high) && high <= kOnigMaxRepeat))) {
    return refuse("tokenizers' Oniguruma refuses a count over 100000");
  }
  // Ruby syntax reads X{n,m} with n > m as a possessive X{m,n}, which takes no lazy mark.
  const bool possessive = high >= 0 && low > high;
  if (possessive) std::swap(low, high);
  const bool lazy = comma != absl::string_view::npos && !possessive && next_is(close + 1, '?');
  OnigQuantifier quantifier{.end = close + 1 + lazy};
  if (std::max(low, high) <= kPcre2MaxRepeat) {
    quantifier.pcre2 = {absl::StrCat("{", low,
                                     comma == absl::string_view::npos
                                         ? ""
                                         : absl::StrCat(",", high < 0 ? "" : absl::StrCat(high)),
                                     "}", lazy ? "?" : "", possessive ? "+" : "")};
    return quantifier;
  }
  if (low == high) quantifier.pcre2 = ExactCountInPcre2(low);  // Lazy or not, an exact count.
  if (quantifier.pcre2.empty()) {
    return refuse(
        "PCRE2 repeats at most 65535 times; an exact count that is a product of two such is split, "
        "another is not");
  }
  return quantifier;
}

}  // namespace titan
