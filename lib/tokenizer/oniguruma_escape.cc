#include "lib/tokenizer/oniguruma_escape.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace titan {

EscapeDigits ReadEscapeDigits(absl::string_view pattern, size_t letter, int capture_groups) {
  const auto run = [&](size_t max, auto is_digit) {
    size_t n = 0;
    while (n < max && letter + 1 + n < pattern.size() && is_digit(pattern[letter + 1 + n])) ++n;
    return n;
  };
  const auto is_octal = [](char c) { return c >= '0' && c <= '7'; };
  const auto octal = [&](size_t size) {
    int code = 0;
    for (const char c : pattern.substr(letter, size + 1)) code = code * 8 + (c - '0');
    return EscapeDigits{.size = size, .code = code};
  };
  const char e = pattern[letter];
  if (e == 'x') {
    const size_t size = run(2, [](char c) { return absl::ascii_isxdigit(c); });
    int code = 0;
    if (size == 0 || !absl::SimpleHexAtoi(pattern.substr(letter + 1, size), &code)) return {};
    return {.size = size, .code = code};
  }
  if (e == '0') return octal(run(2, is_octal));
  if (e < '1' || e > '9') return {};
  const size_t decimal = run(pattern.size(), [](char c) { return absl::ascii_isdigit(c); });
  int number = 0;
  if (!absl::SimpleAtoi(pattern.substr(letter, decimal + 1), &number) || number < 10 ||
      number <= capture_groups) {
    return {.size = decimal};
  }
  return is_octal(e) ? octal(run(2, is_octal)) : EscapeDigits{};
}

}  // namespace titan
