#include "lib/tokenizer/oniguruma_regex.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lib/tokenizer/oniguruma_escape.h"
#include "lib/tokenizer/oniguruma_property.h"
#include "lib/tokenizer/oniguruma_quantifier.h"
#include "lib/util/pcre2_code.h"
#include "lib/util/short_text.h"

namespace titan {
namespace {

// A regex quoted in an error: real split regexes show whole, a huge one (user data) is cut.
constexpr size_t kRegexQuoteBytes = 256;

bool OneOf(absl::string_view chars, char c) { return chars.find(c) != absl::string_view::npos; }

// The length of the group opener at `open`: ( or (?: (?= (?! (?> (?<= (?<! (?<name> (?(cond).
size_t GroupOpenerSize(absl::string_view pattern, size_t open) {
  if (open + 2 >= pattern.size() || pattern[open + 1] != '?') return 1;
  const char kind = pattern[open + 2];
  if (kind == '<' && open + 3 < pattern.size() && OneOf("=!", pattern[open + 3])) return 4;
  if (OneOf("<'(", kind)) {
    const size_t close = pattern.find(kind == '<' ? '>' : kind == '(' ? ')' : '\'', open + 3);
    if (close != absl::string_view::npos) return close + 1 - open;
  }
  return 3;
}

// A group being read, as Oniguruma's parser sees it when a quantifier follows the group: an
// anchor or lookaround (or a group that is only one) is no target it repeats.
struct OpenGroup {
  size_t start = 0;          // The index of its (.
  size_t out_start = 0;      // Where its translation starts in the output.
  bool caseless = false;     // (?i) is in effect where the group is read.
  bool transparent = false;  // (?:...), which Oniguruma parses as its body alone.
  bool lookaround = false;
  // Inline options ((?i)) in it: each makes the rest of it, alternatives after it included, one
  // option node, which the translation opens as (?i: and closes where the group closes.
  size_t option_nodes = 0;
  size_t branch_items = 0;             // Items in the current alternative.
  bool some_branch_is_anchor = false;  // An alternative that is one anchor or lookaround.
};

// Where a character class being read stands, for Oniguruma's rules on ranges.
enum class ClassState {
  kStart,      // Nothing read yet: a - is literal.
  kChar,       // A character that a - may make a range's start.
  kSet,        // A class escape, property or POSIX class: no range's start.
  kRangeOpen,  // A character and -: the next character ends a range.
  kRangeDone,  // A range: a - after it is literal.
};

// The class escape (\w, \p{NAME}, ...) whose letter is at `letter`, as written.
absl::string_view ClassEscapeText(absl::string_view pattern, size_t letter) {
  if (OneOf("pP", pattern[letter])) {
    const size_t close = pattern.find('}', letter);
    if (close != absl::string_view::npos) return pattern.substr(letter - 1, close + 2 - letter);
  }
  return pattern.substr(letter - 1, 2);
}

// Whether the inline options `options` (as in (?i-m)) turn case-insensitive matching on (true),
// off (false), or leave it as `caseless`.
bool CaselessAfter(absl::string_view options, bool caseless) {
  const size_t minus = options.find('-');
  if (OneOf(options.substr(0, minus), 'i')) return true;
  if (minus != absl::string_view::npos && OneOf(options.substr(minus), 'i')) return false;
  return caseless;
}

}  // namespace

absl::StatusOr<std::string> OnigurumaToPcre2(absl::string_view pattern) {
  const std::string word_class = absl::StrCat("[", kOnigWordBody, kOnigLatin1Word, "]");
  const std::string non_word_class = absl::StrCat("[^", kOnigWordBody, kOnigLatin1Word, "]");
  const auto refuse = [&](absl::string_view construct, absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("regex /", ShortText(pattern, kRegexQuoteBytes),
                                                   "/: ", construct, " is not supported (", why,
                                                   ")"));
  };
  std::string out;
  bool in_class = false;
  ClassState class_state = ClassState::kStart;
  absl::string_view class_set;  // The last class escape, property or POSIX class read in [...].
  // tokenizers refuses a range from or to a class escape, property or POSIX class ("unmatched
  // range specifier in char-class"); PCRE2 would range over the characters titan translates
  // some of them to (\h: 0-9a-fA-F).
  const auto read_class_set = [&](absl::string_view set) -> absl::Status {
    if (class_state == ClassState::kRangeOpen) {
      return refuse(absl::StrCat("a range to ", set),
                    "tokenizers' Oniguruma refuses a class escape or property as a range end");
    }
    class_state = ClassState::kSet;
    class_set = set;
    return absl::OkStatus();
  };
  const auto read_class_char = [&] {
    class_state =
        class_state == ClassState::kRangeOpen ? ClassState::kRangeDone : ClassState::kChar;
  };
  // The groups open where i reads (the whole pattern first) and the item last read, which a
  // quantifier repeats: tokenizers refuses a quantified anchor or lookaround ("target of repeat
  // operator is invalid"), which PCRE2 repeats at most once.
  std::vector<OpenGroup> groups(1);
  size_t item_start = std::string::npos;
  size_t item_out_start = 0;  // Where the item's translation starts in `out`.
  bool item_is_anchor = false;
  // Whether a quantifier was read after the item: Oniguruma repeats the quantified item as a
  // whole by another, which PCRE2 refuses or reads as a lazy or possessive mark.
  bool item_quantified = false;
  // The index in `pattern` of what wrote each byte of `out`, for PCRE2's error offset.
  std::vector<size_t> origin;
  size_t token_start = 0;
  int capture_groups = 0;  // Capture groups opened before i: \nn is a backreference to one.
  // Group names, and the names \k<name> and \g<name> refer to: Oniguruma allows a name on several
  // groups, where its \k<name> matches any of them and PCRE2's the first one set.
  absl::flat_hash_map<absl::string_view, int> group_names;
  bool duplicate_names = false;
  std::vector<absl::string_view> references;  // As written: \k<name>.
  const auto read_item = [&](size_t start, bool anchor) {
    item_start = start;
    item_out_start = out.size();
    item_is_anchor = anchor;
    item_quantified = false;
    ++groups.back().branch_items;
  };
  const auto end_branch = [&] {
    OpenGroup& group = groups.back();
    if (group.option_nodes == 0 && group.branch_items == 1 && item_is_anchor) {
      group.some_branch_is_anchor = true;
    }
    group.branch_items = 0;
    item_start = std::string::npos;
  };
  for (size_t i = 0; i < pattern.size(); ++i) {
    origin.resize(out.size(), token_start);
    token_start = i;
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (!in_class) {
        read_item(i - 1, OneOf("bBAzZGKyY", e));
      } else if (OneOf("wWdDsShH", e) ||
                 (OneOf("pP", e) && i + 1 < pattern.size() && pattern[i + 1] == '{')) {
        const absl::Status status = read_class_set(ClassEscapeText(pattern, i));
        if (!status.ok()) return status;
      } else {
        read_class_char();
      }
      switch (e) {
        case 'w':
          absl::StrAppend(&out, in_class ? std::string(kOnigWordBody) : word_class);
          continue;
        case 'W':
          if (in_class) return refuse("\\W inside [...]", "PCRE2 cannot negate a class inside one");
          absl::StrAppend(&out, non_word_class);
          continue;
        case 'b':
        case 'B':
          if (in_class) break;  // Backspace in a class, as in PCRE2.
          // A word boundary by Oniguruma's \w, not PCRE2's.
          absl::StrAppend(&out, "(?:(?<=", word_class, e == 'b' ? ")(?!" : ")(?=", word_class,
                          ")|(?<!", word_class, e == 'b' ? ")(?=" : ")(?!", word_class, "))");
          continue;
        case 'h':  // A hex digit in Oniguruma; horizontal space in PCRE2.
          absl::StrAppend(&out, in_class ? "0-9a-fA-F" : "[0-9a-fA-F]");
          continue;
        case 'H':
          if (in_class) return refuse("\\H inside [...]", "PCRE2 cannot negate a class inside one");
          absl::StrAppend(&out, "[^0-9a-fA-F]");
          continue;
        case 's':  // Unicode White_Space; PCRE2 10.42's \s also takes U+180E.
          absl::StrAppend(&out, "\\p{White_Space}");
          continue;
        case 'S':
          absl::StrAppend(&out, "\\P{White_Space}");
          continue;
        case 'v':  // The vertical tab alone in Oniguruma; any vertical space in PCRE2.
          absl::StrAppend(&out, "\\x{0B}");
          continue;
        case 'u':  // \uHHHH: Oniguruma's code point escape; PCRE2 spells it \x{HHHH}.
          if (i + 4 < pattern.size() && absl::ascii_isxdigit(pattern[i + 1]) &&
              absl::ascii_isxdigit(pattern[i + 2]) && absl::ascii_isxdigit(pattern[i + 3]) &&
              absl::ascii_isxdigit(pattern[i + 4])) {
            absl::StrAppend(&out, "\\x{", pattern.substr(i + 1, 4), "}");
            i += 4;
            continue;
          }
          return refuse("\\u without 4 hex digits", "expected \\uHHHH");
        case 'p':
        case 'P': {
          const std::string escape = absl::StrCat("\\", absl::string_view(&e, 1));
          const size_t close = pattern.find('}', i + 1);
          if (i + 1 == pattern.size() || pattern[i + 1] != '{' ||
              close == absl::string_view::npos) {
            const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
            return refuse(
                absl::StrCat(escape, absl::ascii_isgraph(next) ? std::string(1, next) : "",
                             " without {NAME}"),
                absl::StrCat("a literal ", absl::string_view(&e, 1),
                             " in Oniguruma, a property in PCRE2; write ", escape, "{NAME}"));
          }
          const absl::string_view name = pattern.substr(i + 2, close - i - 2);
          if (in_class && groups.back().caseless) {
            return refuse(absl::StrCat(escape, "{", name, "} inside [...] under (?i)"),
                          "Oniguruma case-folds a class's properties, PCRE2 does not");
          }
          absl::StatusOr<std::string> property = OnigurumaPropertyInPcre2(escape, name, in_class);
          if (!property.ok()) {
            return refuse(absl::StrCat(escape, "{", name, "}"), property.status().message());
          }
          absl::StrAppend(&out, *property);
          i = close;
          continue;
        }
        case 'V':
          return refuse("\\V", "a literal V in Oniguruma, non-vertical-space in PCRE2");
        case 'X':
          return refuse("\\X", "PCRE2 and Oniguruma segment grapheme clusters differently");
        case 'Q':
          return refuse("\\Q", "a literal Q in Oniguruma, a quoting start in PCRE2");
        case 'c':
        case 'C': {
          // Ruby's control escapes \cX and \C-X are X & 0x9f (\c? is DEL); PCRE2's \cX flips bit 6
          // of an upper-cased X (\c1 is q) and its \C is one code unit.
          const size_t arg = e == 'c' ? i + 1 : i + 2;
          if (e == 'C' && (i + 1 >= pattern.size() || pattern[i + 1] != '-')) {
            return refuse("\\C without -X", "Ruby's control escape is \\C-X");
          }
          if (arg >= pattern.size() || pattern[arg] == '\\' ||
              static_cast<unsigned char>(pattern[arg]) >= 0x80) {
            return refuse(pattern.substr(i - 1, std::min(arg + 1, pattern.size()) - (i - 1)),
                          "titan translates a control escape of one ASCII character other than \\");
          }
          absl::StrAppend(
              &out, absl::StrFormat("\\x{%02X}", pattern[arg] == '?' ? 0x7f : pattern[arg] & 0x1f));
          i = arg;
          continue;
        }
        case 'M':
          return refuse("the Oniguruma escape \\M-X", "a meta byte; titan does not translate it");
        case 'O':
        case 'y':
        case 'Y':
          return refuse(absl::StrCat("the Oniguruma escape \\", absl::string_view(&e, 1)),
                        "PCRE2 has none like it; titan does not translate it");
        default:
          break;
      }
      out.push_back('\\');
      out.push_back(e);
      const EscapeDigits escape = ReadEscapeDigits(pattern, i, capture_groups);
      if (escape.code.has_value() && *escape.code >= 0x80) {
        return refuse(pattern.substr(i - 1, escape.size + 2),
                      "a raw byte in Oniguruma (\\xC3\\xA9 is \u00e9), a code point in PCRE2; "
                      "write \\x{HHHH} or \\uHHHH");
      }
      const size_t digits = escape.size;
      absl::StrAppend(&out, pattern.substr(i + 1, digits));
      i += digits;
      // Braced arguments (\x{2028}, \k<name>) are copied whole: their { is no quantifier.
      const char open = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
      if ((OneOf("xo", e) && open == '{' && digits == 0) || (OneOf("kg", e) && open == '<')) {
        const size_t close = pattern.find(open == '{' ? '}' : '>', i + 1);
        if (close != absl::string_view::npos) {
          absl::StrAppend(&out, pattern.substr(i + 1, close - i));
          if (open == '<') references.push_back(pattern.substr(i - 1, close + 2 - i));
          i = close;
        }
      }
      continue;
    }
    if (in_class) {
      if (c == ']') {
        in_class = false;
      } else if (c == '-' && i + 1 < pattern.size() && pattern[i + 1] != ']') {
        if (class_state == ClassState::kSet) {
          return refuse(
              absl::StrCat("a range from ", class_set),
              "tokenizers' Oniguruma refuses a class escape or property as a range start");
        }
        class_state = class_state == ClassState::kChar        ? ClassState::kRangeOpen
                      : class_state == ClassState::kRangeOpen ? ClassState::kRangeDone
                                                              : ClassState::kChar;
      } else if (c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&') {
        return refuse("&& inside [...]", "class intersection in Oniguruma, literal & in PCRE2");
      } else if (c == '[') {
        // POSIX classes; these three mean the same in both, the others (alpha, word, punct, ...)
        // follow different Unicode properties.
        const size_t end = pattern.find(":]", i);
        if (i + 1 < pattern.size() && pattern[i + 1] == ':' && end != absl::string_view::npos) {
          const absl::string_view name = pattern.substr(i, end + 2 - i);
          if (name != "[:digit:]" && name != "[:xdigit:]" && name != "[:cntrl:]" &&
              name != "[:^digit:]" && name != "[:^xdigit:]" && name != "[:^cntrl:]") {
            return refuse(absl::StrCat("POSIX class ", name),
                          "Oniguruma's Unicode meaning differs from PCRE2's");
          }
          const absl::Status status = read_class_set(name);
          if (!status.ok()) return status;
          absl::StrAppend(&out, name);
          i = end + 1;
          continue;
        }
        return refuse("[ inside [...]", "a nested class in Oniguruma, a literal [ in PCRE2");
      } else {
        read_class_char();
      }
      out.push_back(c);
      continue;
    }
    if (OneOf("*+?", c) || (c == '{' && OnigIntervalEnd(pattern, i) != absl::string_view::npos)) {
      absl::StatusOr<OnigQuantifier> quantifier = ReadOnigQuantifier(pattern, i);
      if (!quantifier.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("regex /",
                                                       TextAround(pattern, i, kRegexQuoteBytes),
                                                       "/: ", quantifier.status().message()));
      }
      // At the start, after ( or |, or after an inline option (which opens a node that the
      // quantifier would start), Oniguruma's Ruby syntax refuses a quantifier.
      if (item_start == std::string::npos) {
        return refuse(absl::StrCat("the quantifier ", pattern.substr(i, quantifier->end - i),
                                   " with nothing before it"),
                      "tokenizers' Oniguruma refuses it: target of repeat operator is not "
                      "specified");
      }
      if (item_is_anchor) {
        return refuse(
            absl::StrCat("the quantifier ", pattern.substr(i, quantifier->end - i), " on ",
                         ShortText(pattern.substr(item_start, i - item_start), 64)),
            "tokenizers' Oniguruma refuses to repeat an anchor or a lookaround");
      }
      item_is_anchor = false;  // A repeated item is no anchor: a quantifier may follow it.
      for (const std::string& pcre2 : quantifier->pcre2) {
        if (item_quantified) {
          out.insert(item_out_start, "(?:");
          origin.insert(origin.begin() + item_out_start, 3, item_start);
          out.push_back(')');
        }
        absl::StrAppend(&out, pcre2);
        item_quantified = true;
      }
      i = quantifier->end - 1;
      continue;
    }
    switch (c) {
      case '[':
        read_item(i, false);
        in_class = true;
        class_state = ClassState::kStart;
        out.push_back(c);
        // A ] first in the class (after an optional ^) is literal in both.
        if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
        if (i + 1 < pattern.size() && pattern[i + 1] == ']') {
          out.push_back(pattern[++i]);
          class_state = ClassState::kChar;
        }
        continue;
      case '^':  // Oniguruma (Ruby) anchors always match at line starts and ends.
        read_item(i, true);
        absl::StrAppend(&out, "(?m:^)");
        continue;
      case '$':
        read_item(i, true);
        absl::StrAppend(&out, "(?m:$)");
        continue;
      case '|':
        end_branch();
        break;
      case ')':
        if (groups.size() > 1) {
          end_branch();
          const OpenGroup group = groups.back();
          groups.pop_back();
          out.append(group.option_nodes, ')');
          // Alternatives after a (?i) are inside its option node: only those before it count.
          read_item(group.start,
                    group.lookaround || (group.transparent && group.some_branch_is_anchor));
          item_out_start = group.out_start;
        }
        break;
      case '{':  // No interval (read above): a literal {.
        read_item(i, false);
        break;
      case '(':
        if (absl::StartsWith(pattern.substr(i), "(?#")) {  // A comment, copied whole.
          const size_t close = pattern.find(')', i);
          if (close == absl::string_view::npos) break;
          absl::StrAppend(&out, pattern.substr(i, close + 1 - i));
          i = close;
          continue;
        }
        // Inline options: Ruby's m is PCRE2's s (dot matches newline).
        if (i + 2 < pattern.size() && pattern[i + 1] == '?') {
          size_t j = i + 2;
          while (j < pattern.size() && OneOf("imx-", pattern[j])) ++j;
          if (j > i + 2 && j < pattern.size() && (pattern[j] == ':' || pattern[j] == ')')) {
            std::string options(pattern.substr(i + 2, j - i - 2));
            if (OneOf(options, 'x')) {
              return refuse("(?x)", "extended-mode comments are not translated");
            }
            const bool caseless = CaselessAfter(options, groups.back().caseless);
            std::replace(options.begin(), options.end(), 'm', 's');
            const size_t out_start = out.size();
            // Oniguruma reads a(?i)b|c as a(?i:b|c); PCRE2 as (?:a(?i)b)|(?i:c).
            absl::StrAppend(&out, "(?", options, ":");
            if (pattern[j] == ')') {
              ++groups.back().option_nodes;
              groups.back().caseless = caseless;
              item_start = std::string::npos;
            } else {
              groups.push_back({.start = i, .out_start = out_start, .caseless = caseless});
              item_start = std::string::npos;
            }
            i = j;
            continue;
          }
        }
        {
          const size_t opener = GroupOpenerSize(pattern, i);
          const absl::string_view kind = pattern.substr(i, opener);
          if (kind == "(" || (kind.size() > 3 && OneOf("<'", kind[2]) && !OneOf("=!", kind[3]))) {
            ++capture_groups;
            if (kind.size() > 3 && ++group_names[kind.substr(3, kind.size() - 4)] > 1) {
              duplicate_names = true;
            }
          }
          groups.push_back(
              {.start = i,
               .out_start = out.size(),
               .caseless = groups.back().caseless,
               .transparent = kind == "(?:",
               .lookaround = kind == "(?=" || kind == "(?!" || kind == "(?<=" || kind == "(?<!"});
          item_start = std::string::npos;
          absl::StrAppend(&out, kind);
          i += opener - 1;
          continue;
        }
      default:
        // A UTF-8 continuation byte belongs to the character before it.
        if ((c & 0xC0) != 0x80) read_item(i, false);
        break;
    }
    out.push_back(c);
  }
  origin.resize(out.size(), token_start);
  out.append(groups.front().option_nodes, ')');
  if (duplicate_names) {
    for (const absl::string_view reference : references) {
      const auto named = group_names.find(reference.substr(3, reference.size() - 4));
      if (named != group_names.end() && named->second > 1) {
        return refuse(absl::StrCat(reference, " to a name of several groups"),
                      "Oniguruma matches any of them, PCRE2 the first one set; tokenizers refuses "
                      "a \\g call to one");
      }
    }
    out.insert(0, "(?J)");  // PCRE2_DUPNAMES, which Oniguruma always allows.
    origin.insert(origin.begin(), 4, 0);
  }
  size_t offset = 0;
  if (absl::StatusOr<Pcre2Code> code = CompilePcre2(out, PCRE2_UCP, &offset); !code.ok()) {
    // PCRE2's offset is into the translation, which differs where \w, \p{...} or ^ was read:
    // each quote shows the text around it.
    const size_t written = offset < origin.size() ? origin[offset] : pattern.size();
    return absl::InvalidArgumentError(absl::StrCat(
        "regex /", TextAround(pattern, written, kRegexQuoteBytes),
        "/: PCRE2 refuses it: ", code.status().message(),
        out == pattern ? ""
                       : absl::StrCat(" of its translation /",
                                      TextAround(out, offset, kRegexQuoteBytes), "/")));
  }
  return out;
}

}  // namespace titan
