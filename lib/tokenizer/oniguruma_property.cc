#include "lib/tokenizer/oniguruma_property.h"

#include <algorithm>
#include <iterator>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/util/pcre2_code.h"

namespace titan {
namespace {

// Property names PCRE2 knows and Oniguruma refuses (as LooseName spells them).
constexpr absl::string_view kPcre2OnlyProperties[] = {"xan", "xps", "xsp",   "xuc",
                                                      "xwd", "l&",  "bidim", "bidimirrored"};

// A property name as both libraries match it: case, spaces, hyphens and underscores ignored.
std::string LooseName(absl::string_view name) {
  std::string loose;
  for (const char c : name) {
    if (absl::string_view(" -_").find(c) == absl::string_view::npos) {
      loose.push_back(absl::ascii_tolower(c));
    }
  }
  return loose;
}

// An Oniguruma property PCRE2 10.42 lacks or names otherwise, as the body of a PCRE2 class (inside
// [...]), and its complement as one where it has one (empty: it has none).
struct OnigProperty {
  absl::string_view loose_name;  // As LooseName spells it.
  absl::string_view body;
  absl::string_view complement;
  absl::string_view bare_extra = "";  // What it also holds outside [...] (Latin-1 table reads).
};

// Oniguruma's POSIX-bracket properties under Unicode (its make_unicode_property_data.py), and the
// long General_Category names PCRE2 spells short.
constexpr OnigProperty kOnigProperties[] = {
    {"alpha", R"(\p{Alphabetic})", R"(\P{Alphabetic})"},
    {"upper", R"(\p{Uppercase})", R"(\P{Uppercase})"},
    {"lower", R"(\p{Lowercase})", R"(\P{Lowercase})"},
    {"space", R"(\p{White_Space})", R"(\P{White_Space})"},
    {"digit", R"(\p{Nd})", R"(\P{Nd})"},
    {"cntrl", R"(\p{Cc})", R"(\P{Cc})"},
    {"punct", R"(\p{P})", R"(\P{P})"},
    {"alnum", R"(\p{Alphabetic}\p{Nd})", ""},
    {"word", kOnigWordBody, "", kOnigLatin1Word},
    {"blank", R"(\x{09}\p{Zs})", ""},
    // Not White_Space, Cc, Cs or Cn; Print adds Zs (all of it is White_Space).
    {"graph", R"(\p{L}\p{M}\p{N}\p{P}\p{S}\p{Cf}\p{Co})", R"(\p{Z}\p{Cc}\p{Cs}\p{Cn})"},
    {"print", R"(\p{L}\p{M}\p{N}\p{P}\p{S}\p{Cf}\p{Co}\p{Zs})",
     R"(\p{Zl}\p{Zp}\p{Cc}\p{Cs}\p{Cn})"},
    {"xdigit", "0-9A-Fa-f", R"(\x{00}-\x{2F}\x{3A}-\x{40}\x{47}-\x{60}\x{67}-\x{10FFFF})"},
    {"ascii", R"(\x{00}-\x{7F})", R"(\x{80}-\x{10FFFF})"},
    {"newline", R"(\x{0A})", R"(\x{00}-\x{09}\x{0B}-\x{10FFFF})"},
    {"posixpunct", R"(\p{P}\p{S})", ""},
    {"assigned", R"(\P{Cn})", R"(\p{Cn})"},
    {"letter", R"(\p{L})", R"(\P{L})"},
    {"casedletter", R"(\p{LC})", R"(\P{LC})"},
    {"uppercaseletter", R"(\p{Lu})", R"(\P{Lu})"},
    {"lowercaseletter", R"(\p{Ll})", R"(\P{Ll})"},
    {"titlecaseletter", R"(\p{Lt})", R"(\P{Lt})"},
    {"modifierletter", R"(\p{Lm})", R"(\P{Lm})"},
    {"otherletter", R"(\p{Lo})", R"(\P{Lo})"},
    {"mark", R"(\p{M})", R"(\P{M})"},
    {"combiningmark", R"(\p{M})", R"(\P{M})"},
    {"nonspacingmark", R"(\p{Mn})", R"(\P{Mn})"},
    {"spacingmark", R"(\p{Mc})", R"(\P{Mc})"},
    {"enclosingmark", R"(\p{Me})", R"(\P{Me})"},
    {"number", R"(\p{N})", R"(\P{N})"},
    {"decimalnumber", R"(\p{Nd})", R"(\P{Nd})"},
    {"letternumber", R"(\p{Nl})", R"(\P{Nl})"},
    {"othernumber", R"(\p{No})", R"(\P{No})"},
    {"punctuation", R"(\p{P})", R"(\P{P})"},
    {"connectorpunctuation", R"(\p{Pc})", R"(\P{Pc})"},
    {"dashpunctuation", R"(\p{Pd})", R"(\P{Pd})"},
    {"openpunctuation", R"(\p{Ps})", R"(\P{Ps})"},
    {"closepunctuation", R"(\p{Pe})", R"(\P{Pe})"},
    {"initialpunctuation", R"(\p{Pi})", R"(\P{Pi})"},
    {"finalpunctuation", R"(\p{Pf})", R"(\P{Pf})"},
    {"otherpunctuation", R"(\p{Po})", R"(\P{Po})"},
    {"symbol", R"(\p{S})", R"(\P{S})"},
    {"mathsymbol", R"(\p{Sm})", R"(\P{Sm})"},
    {"currencysymbol", R"(\p{Sc})", R"(\P{Sc})"},
    {"modifiersymbol", R"(\p{Sk})", R"(\P{Sk})"},
    {"othersymbol", R"(\p{So})", R"(\P{So})"},
    {"separator", R"(\p{Z})", R"(\P{Z})"},
    {"spaceseparator", R"(\p{Zs})", R"(\P{Zs})"},
    {"lineseparator", R"(\p{Zl})", R"(\P{Zl})"},
    {"paragraphseparator", R"(\p{Zp})", R"(\P{Zp})"},
    {"other", R"(\p{C})", R"(\P{C})"},
    {"control", R"(\p{Cc})", R"(\P{Cc})"},
    {"format", R"(\p{Cf})", R"(\P{Cf})"},
    {"surrogate", R"(\p{Cs})", R"(\P{Cs})"},
    {"privateuse", R"(\p{Co})", R"(\P{Co})"},
    {"unassigned", R"(\p{Cn})", R"(\P{Cn})"},
};

// Whether PCRE2 knows `name` as a script: its bare script names mean Script_Extensions
// (U+3001 is in \p{Han}), Oniguruma's mean Script, which \p{sc:NAME} spells in PCRE2.
bool IsPcre2Script(absl::string_view name) {
  return CompilePcre2(absl::StrCat("\\p{sc:", name, "}"), PCRE2_UCP).ok();
}

}  // namespace

absl::StatusOr<std::string> OnigurumaPropertyInPcre2(absl::string_view escape,
                                                     absl::string_view name, bool in_class) {
  const bool negated = absl::StartsWith(name, "^");
  const absl::string_view property = name.substr(negated ? 1 : 0);
  const std::string loose_name = LooseName(property);
  for (const OnigProperty& onig : kOnigProperties) {
    if (onig.loose_name != loose_name) continue;
    const bool complement = negated != (escape == "\\P");
    if (!in_class) return absl::StrCat(complement ? "[^" : "[", onig.body, onig.bare_extra, "]");
    if (!complement) return std::string(onig.body);
    if (onig.complement.empty()) {
      return absl::InvalidArgumentError("its complement has no PCRE2 spelling inside [...]");
    }
    return std::string(onig.complement);
  }
  if (property.find_first_of(":=") != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        "PCRE2's property:value form; Oniguruma has no such property");
  }
  if (std::find(std::begin(kPcre2OnlyProperties), std::end(kPcre2OnlyProperties), loose_name) !=
      std::end(kPcre2OnlyProperties)) {
    return absl::InvalidArgumentError("a PCRE2 property Oniguruma does not have");
  }
  if (IsPcre2Script(property)) {
    return absl::StrCat(escape, "{", negated ? "^" : "", "sc:", property, "}");
  }
  return absl::StrCat(escape, "{", name, "}");
}

}  // namespace titan
