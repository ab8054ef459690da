#include "lib/hub/repo_glob.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace titan {
namespace {

// A UTF-8 character, or a stray byte (which PCRE2_UTF then refuses). Comparing two as strings
// orders them as their code points, as Python compares range ends.
using Char = std::string;

std::vector<Char> Chars(absl::string_view text) {
  std::vector<Char> chars;
  while (!text.empty()) {
    const unsigned char lead = text[0];
    const size_t size = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    chars.emplace_back(text.substr(0, size));
    text.remove_prefix(std::min(size, text.size()));
  }
  return chars;
}

// One character matched literally, in or out of a character class.
std::string Literal(const Char& c) {
  const bool punct = c.size() == 1 && !absl::ascii_isalnum(static_cast<unsigned char>(c[0]));
  return punct ? absl::StrCat("\\", c) : c;
}

std::string Literals(const std::vector<Char>& chars) {
  std::string out;
  for (const Char& c : chars) out += Literal(c);
  return out;
}

// The class for glob[i, j) (the text between "[" and "]"), as fnmatch.translate builds it: `-`
// makes ranges (one after a range end is literal), reversed ranges drop both ends, a leading `!`
// negates.
std::string CharClass(const std::vector<Char>& glob, size_t i, size_t j) {
  std::vector<std::vector<Char>> chunks;
  const auto span = [&](size_t from, size_t to) {
    return std::vector<Char>(glob.begin() + from, glob.begin() + to);
  };
  size_t k = glob[i] == "!" ? i + 2 : i + 1;
  for (; k < j; ++k) {
    if (glob[k] != "-") continue;
    chunks.push_back(span(i, k));
    i = k + 1;
    k += 2;
  }
  if (i < j) {
    chunks.push_back(span(i, j));
  } else if (!chunks.empty()) {
    chunks.back().push_back("-");
  }
  for (size_t c = chunks.size() - 1; c > 0 && c < chunks.size(); --c) {
    if (chunks[c - 1].back() > chunks[c].front()) {
      chunks[c - 1].pop_back();
      chunks[c - 1].insert(chunks[c - 1].end(), chunks[c].begin() + 1, chunks[c].end());
      chunks.erase(chunks.begin() + c);
    }
  }
  bool negate = false;
  if (!chunks.empty() && !chunks[0].empty() && chunks[0][0] == "!") {
    negate = true;
    chunks[0].erase(chunks[0].begin());
  }
  std::vector<std::string> parts;
  for (const std::vector<Char>& chunk : chunks) parts.push_back(Literals(chunk));
  const std::string members = absl::StrJoin(parts, "-");
  if (members.empty()) return negate ? "." : "(?!)";
  return absl::StrCat("[", negate ? "^" : "", members, "]");
}

}  // namespace

std::string FnmatchToPcre2(absl::string_view glob) {
  const std::vector<Char> chars = Chars(glob);
  // The regex pieces before, between and after the stars (a run of stars is one).
  std::vector<std::string> pieces(1);
  const size_t n = chars.size();
  for (size_t i = 0; i < n;) {
    const Char& c = chars[i++];
    if (c == "*") {
      if (!pieces.back().empty() || pieces.size() == 1) pieces.emplace_back();
    } else if (c == "?") {
      pieces.back() += ".";
    } else if (c == "[") {
      size_t j = i;
      if (j < n && chars[j] == "!") ++j;
      if (j < n && chars[j] == "]") ++j;
      while (j < n && chars[j] != "]") ++j;
      if (j >= n) {
        pieces.back() += "\\[";
      } else {
        pieces.back() += CharClass(chars, i, j);
        i = j + 1;
      }
    } else {
      pieces.back() += Literal(c);
    }
  }
  // As translate: stars between fixed pieces match as little as they can, atomically.
  std::string regex = pieces[0];
  for (size_t p = 1; p < pieces.size(); ++p) {
    absl::StrAppend(&regex, p + 1 == pieces.size() ? ".*" : "(?>.*?", pieces[p],
                    p + 1 == pieces.size() ? "" : ")");
  }
  return absl::StrCat("(?s:", regex, ")\\z");
}

absl::StatusOr<RepoGlob> RepoGlob::Compile(absl::string_view glob) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("glob \"", absl::CHexEscape(glob), "\": ", why));
  };
  // UTF-8 is checked on the glob as typed: in the regex it becomes, the bad byte sits elsewhere.
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* literal =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(glob.data()), glob.size(),
                    PCRE2_UTF | PCRE2_LITERAL, &error_code, &error_offset, nullptr);
  const bool not_utf8 = literal == nullptr && error_code < 0;  // UTF errors are negative codes
  pcre2_code_free(literal);
  if (not_utf8) {
    return refuse(absl::StrCat(Pcre2ErrorMessage(error_code), " at byte offset ", error_offset,
                               " of the glob"));
  }
  std::string normalized = absl::StrReplaceAll(glob, {{"\\", "/"}});
  if (absl::EndsWith(normalized, "/")) normalized += "*";
  size_t regex_offset = 0;
  absl::StatusOr<Pcre2Code> code =
      CompilePcre2(FnmatchToPcre2(normalized), PCRE2_ANCHORED, &regex_offset);
  if (!code.ok()) {  // as "regular expression is too large": an offset in the regex means nothing
    return refuse(absl::StrCat(
        "the regex it translates to does not compile: ",
        absl::StripSuffix(code.status().message(), absl::StrCat(" at offset ", regex_offset))));
  }
  return RepoGlob(*std::move(code));
}

bool RepoGlob::Matches(absl::string_view path) const {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_.get(), nullptr);
  const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(path.data()), path.size(), 0,
                             0, match, nullptr);
  pcre2_match_data_free(match);
  return rc > 0;
}

}  // namespace titan
