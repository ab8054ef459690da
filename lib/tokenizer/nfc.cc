#include "lib/tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace titan {
namespace {

struct CombiningClassRange {
  char32_t first;
  char32_t last;
  uint8_t combining_class;
};
struct Decomposition {
  char32_t code_point;
  uint16_t offset;
  uint8_t length;
};
struct Composition {
  char32_t first;
  char32_t second;
  char32_t composite;
};

#include "lib/tokenizer/nfc_tables.inc"

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr char32_t kSCount = kLCount * kNCount;

// Stands for a byte that is not UTF-8: above every code point, class 0, composes with nothing.
constexpr char32_t kRawByte = 0x110000;

uint8_t CombiningClass(char32_t c) {
  const auto* end = std::end(kCombiningClassRanges);
  const auto* it = std::upper_bound(
      std::begin(kCombiningClassRanges), end, c,
      [](char32_t value, const CombiningClassRange& range) { return value < range.first; });
  if (it == std::begin(kCombiningClassRanges)) return 0;
  --it;
  return c <= it->last ? it->combining_class : 0;
}

void Decompose(char32_t c, std::vector<char32_t>* out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecompositions);
  const auto* it =
      std::lower_bound(std::begin(kDecompositions), end, c,
                       [](const Decomposition& d, char32_t value) { return d.code_point < value; });
  if (it == end || it->code_point != c) {
    out->push_back(c);
    return;
  }
  out->insert(out->end(), kDecomposed + it->offset, kDecomposed + it->offset + it->length);
}

// The primary composite of `first` and `second`, or 0.
char32_t Compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  const auto* end = std::end(kCompositions);
  const auto* it =
      std::lower_bound(std::begin(kCompositions), end, Composition{first, second, 0},
                       [](const Composition& a, const Composition& b) {
                         return a.first != b.first ? a.first < b.first : a.second < b.second;
                       });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

// Code points below U+0300 have class 0, and NFC keeps them as they are.
bool BelowCombiningMarks(absl::string_view text) {
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return static_cast<uint8_t>(c) < 0xCC; });
}

// The UTF-8 character at `pos` and its length; a byte that does not start one is kRawByte + byte.
std::pair<char32_t, size_t> DecodeAt(absl::string_view s, size_t pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return {lead, 1};
  const size_t len = (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || pos + len > s.size()) return {kRawByte + lead, 1};
  char32_t c = lead & (0x7F >> len);
  for (size_t i = 1; i < len; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return {kRawByte + lead, 1};
    c = (c << 6) | (byte(pos + i) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8 either.
  constexpr char32_t kMinimum[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < kMinimum[len] || (c >= 0xD800 && c < 0xE000) || c > 0x10FFFF) {
    return {kRawByte + lead, 1};
  }
  return {c, len};
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c >= kRawByte) {
    out->push_back(static_cast<char>(c - kRawByte));
  } else if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace

std::string NfcNormalize(absl::string_view text) {
  if (BelowCombiningMarks(text)) return std::string(text);
  // Canonical decomposition.
  std::vector<char32_t> chars;
  chars.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const auto [c, len] = DecodeAt(text, pos);
    pos += len;
    if (c >= kRawByte) {
      chars.push_back(c);
    } else {
      Decompose(c, &chars);
    }
  }
  // Canonical ordering: each run of marks stably sorted by class.
  for (size_t i = 0; i < chars.size();) {
    if (CombiningClass(chars[i]) == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < chars.size() && CombiningClass(chars[end]) != 0) ++end;
    std::stable_sort(chars.begin() + i, chars.begin() + end,
                     [](char32_t a, char32_t b) { return CombiningClass(a) < CombiningClass(b); });
    i = end;
  }
  // Canonical composition (Unicode's sample algorithm): a character joins the last starter unless
  // a character between them has class 0 or one at least its own.
  size_t starter = 0;
  int last_class = chars.empty() || CombiningClass(chars[0]) == 0 ? 0 : 256;
  size_t kept = chars.empty() ? 0 : 1;
  for (size_t i = 1; i < chars.size(); ++i) {
    const char32_t c = chars[i];
    const int c_class = CombiningClass(c);
    const char32_t composite =
        chars[starter] < kRawByte && c < kRawByte ? Compose(chars[starter], c) : 0;
    if (composite != 0 && (last_class < c_class || last_class == 0)) {
      chars[starter] = composite;
      continue;
    }
    if (c_class == 0) starter = kept;
    last_class = c_class;
    chars[kept++] = c;
  }
  chars.resize(kept);
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : chars) AppendUtf8(c, &out);
  return out;
}

}  // namespace titan
