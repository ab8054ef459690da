#include "lib/util/redact.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

extern char** environ;

namespace titan {

std::string RedactUrl(absl::string_view url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == absl::string_view::npos) return std::string(url);
  const size_t host_start = scheme_end + 3;
  const size_t authority_end = std::min(url.find_first_of("/?#", host_start), url.size());
  const size_t at = url.substr(0, authority_end).rfind('@');
  if (at == absl::string_view::npos || at < host_start) return std::string(url);
  return absl::StrCat(url.substr(0, host_start), "***", url.substr(at));
}

std::string RedactUrlsIn(absl::string_view text) {
  std::string redacted;
  size_t copied = 0;  // text before it is in `redacted`
  for (size_t scheme_end = text.find("://"); scheme_end != absl::string_view::npos;
       scheme_end = text.find("://", copied)) {
    size_t url_start = scheme_end;
    while (url_start > copied && absl::ascii_isalnum(text[url_start - 1])) --url_start;
    const size_t url_end = std::min(text.find_first_of(" \t\r\n\"'<>", scheme_end), text.size());
    absl::StrAppend(&redacted, text.substr(copied, url_start - copied),
                    RedactUrl(text.substr(url_start, url_end - url_start)));
    copied = url_end;
  }
  absl::StrAppend(&redacted, text.substr(copied));
  return redacted;
}

namespace {

constexpr size_t kShortestSecretEnvValue = 8;

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '_' || c == '-' || c == '.'; }

// `name`'s words, lowercase: split at non-alphanumerics and camelCase ("HFToken": hf, token).
std::vector<std::string> NameWords(absl::string_view name) {
  std::vector<std::string> words(1);
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (!absl::ascii_isalnum(c)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const bool starts_word = absl::ascii_isupper(c) && i > 0 &&
                             (absl::ascii_islower(name[i - 1]) ||
                              (absl::ascii_isupper(name[i - 1]) && i + 1 < name.size() &&
                               absl::ascii_islower(name[i + 1])));
    if (starts_word && !words.back().empty()) words.emplace_back();
    words.back().push_back(absl::ascii_tolower(c));
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

// Environment values under secret-looking names, longest first (one may hold another).
std::vector<std::string> SecretEnvValues() {
  std::vector<std::string> values;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const absl::string_view line = *entry;
    const size_t equals = line.find('=');
    if (equals == absl::string_view::npos) continue;
    const std::string name = absl::AsciiStrToUpper(line.substr(0, equals));
    const absl::string_view value = line.substr(equals + 1);
    if (value.size() < kShortestSecretEnvValue) continue;
    for (absl::string_view marker :
         {"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"}) {
      if (absl::StrContains(name, marker)) {
        values.emplace_back(value);
        break;
      }
    }
  }
  std::sort(values.begin(), values.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  return values;
}

// `text` with the value after each secret name and its '=' or ':' replaced by "***".
std::string RedactNamedValues(absl::string_view text) {
  std::string redacted;
  size_t copied = 0;  // text before it is in `redacted`
  size_t i = 0;
  while (i < text.size()) {
    if (!IsNameChar(text[i])) {
      ++i;
      continue;
    }
    size_t name_end = i;
    while (name_end < text.size() && IsNameChar(text[name_end])) ++name_end;
    const absl::string_view name = text.substr(i, name_end - i);
    i = name_end;
    if (!IsSecretName(name)) continue;
    size_t at = name_end;
    auto skip = [&](absl::string_view chars) {
      while (at < text.size() && absl::StrContains(chars, text[at])) ++at;
    };
    skip("\\\"'");  // Quotes, escaped too, as in a TOML string holding JSON.
    skip(" \t");
    if (at >= text.size() || (text[at] != '=' && text[at] != ':')) continue;
    ++at;
    skip(" \t");
    // A value quoted inside a quoted string (\"...\") ends at the escape of its closing quote.
    const bool escaped =
        at + 1 < text.size() && text[at] == '\\' && (text[at + 1] == '"' || text[at + 1] == '\'');
    if (escaped) ++at;
    // A quoted value ends at its closing quote (or the line's end), spaces and all.
    const char quote = at < text.size() && (text[at] == '"' || text[at] == '\'') ? text[at] : 0;
    if (quote != 0) ++at;
    // "Authorization: Bearer <token>": the scheme is no secret, the word after it is.
    size_t word_end = at;
    while (word_end < text.size() && absl::ascii_isalpha(text[word_end])) ++word_end;
    const std::string scheme = absl::AsciiStrToLower(text.substr(at, word_end - at));
    if ((scheme == "bearer" || scheme == "basic" || scheme == "token") && word_end < text.size() &&
        text[word_end] == ' ') {
      at = word_end;
      skip(" ");
    }
    // An unquoted value ends at a backslash too: the escape of a quote around it, which stays.
    const absl::string_view value_ends = escaped        ? absl::string_view("\\\r\n")
                                         : quote == '"' ? absl::string_view("\"\r\n")
                                         : quote == '\''
                                             ? absl::string_view("'\r\n")
                                             : absl::string_view(" \t\r\n\"',;&)]}<>\\");
    size_t value_end = at;
    while (value_end < text.size() && !absl::StrContains(value_ends, text[value_end])) ++value_end;
    if (value_end == at) continue;
    absl::StrAppend(&redacted, text.substr(copied, at - copied), "***");
    copied = i = value_end;
  }
  absl::StrAppend(&redacted, text.substr(copied));
  return redacted;
}

}  // namespace

bool IsSecretName(absl::string_view name) {
  const std::vector<std::string> words = NameWords(name);
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word == "token" || word == "secret" || word == "password" || word == "passwd" ||
        word == "credential" || word == "credentials" || word == "authorization" ||
        word == "apikey") {
      return true;
    }
    if (word == "key" && i > 0 &&
        (words[i - 1] == "api" || words[i - 1] == "access" || words[i - 1] == "secret" ||
         words[i - 1] == "private")) {
      return true;
    }
  }
  return false;
}

std::string RedactSecretsIn(absl::string_view text) {
  std::string redacted = RedactUrlsIn(text);
  for (const std::string& value : SecretEnvValues()) {
    absl::StrReplaceAll({{value, "***"}}, &redacted);
  }
  return RedactNamedValues(redacted);
}

}  // namespace titan
