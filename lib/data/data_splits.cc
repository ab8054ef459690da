#include "lib/data/data_splits.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"
#include "lib/util/file_util.h"
#include "lib/util/pcre2_code.h"
#include "pcre2.h"

namespace titan {
namespace {

struct SplitKeywords {
  const char* split;
  std::vector<absl::string_view> keywords;
};

// HF's SPLIT_KEYWORDS, in its order of the splits.
const std::vector<SplitKeywords>& DefaultSplits() {
  static const auto* splits = new std::vector<SplitKeywords>{
      {"train", {"train", "training"}},
      {"validation", {"validation", "valid", "dev", "val"}},
      {"test", {"test", "testing", "eval", "evaluation"}},
  };
  return *splits;
}

// HF's NON_WORDS_CHARS: what may stand next to a keyword in a name.
bool IsSeparator(char c) {
  return c == '-' || c == '.' || c == '_' || c == ' ' || absl::ascii_isdigit(c);
}

// Where `name` holds `keyword` preceded by a separator or the start; with `separator_after`, also
// followed by a separator, else by a separator or the end (case-sensitive, as HF's globs).
bool NameHasKeyword(absl::string_view name, absl::string_view keyword, bool separator_after) {
  for (size_t at = name.find(keyword); at != absl::string_view::npos;
       at = name.find(keyword, at + 1)) {
    const size_t end = at + keyword.size();
    const bool before = at == 0 || IsSeparator(name[at - 1]);
    const bool after = end < name.size() ? IsSeparator(name[end]) : !separator_after;
    if (before && after) return true;
  }
  return false;
}

// Whether a folder of `path` (its last component is the file) is named for `keyword`.
bool FolderHasKeyword(absl::string_view path, absl::string_view keyword) {
  size_t slash = path.find('/');
  while (slash != absl::string_view::npos) {
    if (NameHasKeyword(path.substr(0, slash), keyword, /*separator_after=*/false)) return true;
    path.remove_prefix(slash + 1);
    slash = path.find('/');
  }
  return false;
}

// A pattern of this file, compiled once; they are fixed, so one that fails is a bug here.
// File names need not be UTF-8 (Linux allows any bytes): patterns over them match bytes.
const pcre2_code* Pattern(absl::string_view pattern, uint32_t options) {
  absl::StatusOr<Pcre2Code> code = CompilePcre2(pattern, options | PCRE2_ANCHORED);
  CHECK(code.ok()) << pattern << ": " << code.status();
  return code->release();
}

// Whether `code` matches `text` (from its start); its first group into *group where given.
bool Matches(const pcre2_code* code, absl::string_view text, std::string* group = nullptr) {
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0,
                             match, nullptr);
  if (rc > 1 && group != nullptr) {
    const PCRE2_SIZE* offsets = pcre2_get_ovector_pointer(match);
    *group = std::string(text.substr(offsets[2], offsets[3] - offsets[2]));
  }
  pcre2_match_data_free(match);
  return rc > 0;
}

// HF's SPLIT_PATTERN_SHARDED, "data/{split}-[0-9]{5}-of-[0-9]{5}*.*", as a glob: the part of a
// file's name after its split.
constexpr absl::string_view kShardAfterSplit = "-[0-9]{5}-of-[0-9]{5}[^/]*\\.[^/]*";

bool IsShardAfterSplit(absl::string_view rest) {
  static const pcre2_code* const kShard =
      Pattern(kShardAfterSplit, PCRE2_ENDANCHORED | PCRE2_NEVER_UTF);
  return Matches(kShard, rest);
}

// The file name of `path` when it lies directly in data/, else "".
absl::string_view NameInDataFolder(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, "data/") || absl::StrContains(path, '/')) return "";
  return path;
}

// The sharded splits as HF finds them: its glob with "*" for the split picks the files; each
// file's split is what HF's un-formatting regex (greedy) reads before "-NNNNN-of-NNNN"; a split
// holds every file its glob matches.
absl::StatusOr<std::vector<DataSplit>> ShardedSplits(const std::vector<std::string>& files) {
  static const pcre2_code* const kShardName =
      Pattern(absl::StrCat("[^/]*", kShardAfterSplit), PCRE2_ENDANCHORED | PCRE2_NEVER_UTF);
  static const pcre2_code* const kSplitOfName =
      Pattern("(.+)-[0-9]{5}-of-[0-9]{4}", PCRE2_NEVER_UTF);
  // Python's \w over the name as text: a name that is not UTF-8 fails it, as HF's str would.
  static const pcre2_code* const kSplitName =
      Pattern("\\w+(\\.\\w+)*", PCRE2_ENDANCHORED | PCRE2_UCP);
  std::vector<DataSplit> splits;
  for (const std::string& file : files) {
    const absl::string_view name = NameInDataFolder(file);
    if (!Matches(kShardName, name)) continue;
    std::string split;
    if (!Matches(kSplitOfName, name, &split)) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": names no split before its -NNNNN-of-NNNNN (Hugging Face datasets fails on it)"));
    }
    if (!Matches(kSplitName, split)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": split name \"", split,
                       "\" is not word characters joined by dots, as Hugging Face datasets "
                       "requires (^\\w+(\\.\\w+)*$); rename the file"));
    }
    if (std::none_of(splits.begin(), splits.end(),
                     [&](const DataSplit& s) { return s.name == split; })) {
      splits.push_back(DataSplit{split, {}});
    }
  }
  for (DataSplit& split : splits) {
    for (const std::string& file : files) {
      const absl::string_view name = NameInDataFolder(file);
      if (absl::StartsWith(name, split.name) && IsShardAfterSplit(name.substr(split.name.size()))) {
        split.files.push_back(file);
      }
    }
  }
  return splits;
}

// The default splits whose files `in_split` picks, or none when it picks no file.
std::vector<DataSplit> SplitsBy(
    const std::vector<std::string>& files,
    const std::function<bool(absl::string_view, absl::string_view)>& in_split) {
  std::vector<DataSplit> splits;
  for (const SplitKeywords& split : DefaultSplits()) {
    DataSplit found{split.split, {}};
    for (const std::string& file : files) {
      for (absl::string_view keyword : split.keywords) {
        if (!in_split(file, keyword)) continue;
        found.files.push_back(file);
        break;
      }
    }
    if (!found.files.empty()) splits.push_back(std::move(found));
  }
  return splits;
}

}  // namespace

absl::StatusOr<std::vector<DataSplit>> InferDataSplits(const std::vector<std::string>& files) {
  // HF tries its patterns in this order and keeps the first kind that picks any file.
  absl::StatusOr<std::vector<DataSplit>> splits = ShardedSplits(files);
  if (!splits.ok() || !splits->empty()) {
    if (splits.ok()) {
      // The default splits first, then the others by name.
      auto rank = [](const DataSplit& split) {
        const auto& defaults = DefaultSplits();
        for (size_t i = 0; i < defaults.size(); ++i) {
          if (split.name == defaults[i].split) return i;
        }
        return defaults.size();
      };
      std::stable_sort(splits->begin(), splits->end(), [&](const DataSplit& a, const DataSplit& b) {
        return rank(a) != rank(b) ? rank(a) < rank(b) : a.name < b.name;
      });
    }
    return splits;
  }
  std::vector<DataSplit> named = SplitsBy(files, FolderHasKeyword);
  if (!named.empty()) return named;
  return SplitsBy(files, [](absl::string_view file, absl::string_view keyword) {
    return NameHasKeyword(Basename(file), keyword, /*separator_after=*/true);
  });
}

std::string SplitNamePatterns(absl::string_view split) {
  for (const SplitKeywords& candidate : DefaultSplits()) {
    if (candidate.split != split) continue;
    return absl::StrJoin(candidate.keywords, ", ", [](std::string* out, absl::string_view word) {
      absl::StrAppend(out, word, "*");
    });
  }
  return "";
}

}  // namespace titan
