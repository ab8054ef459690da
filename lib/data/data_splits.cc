#include "lib/data/data_splits.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

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

absl::string_view BaseName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// HF's SPLIT_PATTERN_SHARDED, "data/{split}-[0-9]{5}-of-[0-9]{5}*.*": the split named by a
// file directly in data/, or "" when it is not named so.
std::string ShardedSplit(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, "data/") || absl::StrContains(path, '/')) return "";
  constexpr absl::string_view kShard = "-00000-of-00000";
  for (size_t dash = path.find('-'); dash != absl::string_view::npos && dash > 0;
       dash = path.find('-', dash + 1)) {
    absl::string_view rest = path.substr(dash);
    if (rest.size() < kShard.size()) break;
    bool shard = true;
    for (size_t i = 0; i < kShard.size() && shard; ++i) {
      shard = kShard[i] == '0' ? absl::ascii_isdigit(rest[i]) : rest[i] == kShard[i];
    }
    if (shard && absl::StrContains(rest.substr(kShard.size()), '.')) {
      return std::string(path.substr(0, dash));
    }
  }
  return "";
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

std::vector<DataSplit> InferDataSplits(const std::vector<std::string>& files) {
  // HF tries its patterns in this order and keeps the first kind that picks any file.
  std::vector<DataSplit> splits;
  for (const std::string& file : files) {
    const std::string name = ShardedSplit(file);
    if (name.empty()) continue;
    auto split = std::find_if(splits.begin(), splits.end(),
                              [&](const DataSplit& s) { return s.name == name; });
    if (split == splits.end()) split = splits.insert(splits.end(), DataSplit{name, {}});
    split->files.push_back(file);
  }
  if (!splits.empty()) {
    // The default splits first, then the others by name.
    auto rank = [](const DataSplit& split) {
      const auto& defaults = DefaultSplits();
      for (size_t i = 0; i < defaults.size(); ++i) {
        if (split.name == defaults[i].split) return i;
      }
      return defaults.size();
    };
    std::stable_sort(splits.begin(), splits.end(), [&](const DataSplit& a, const DataSplit& b) {
      return rank(a) != rank(b) ? rank(a) < rank(b) : a.name < b.name;
    });
    return splits;
  }
  splits = SplitsBy(files, FolderHasKeyword);
  if (!splits.empty()) return splits;
  return SplitsBy(files, [](absl::string_view file, absl::string_view keyword) {
    return NameHasKeyword(BaseName(file), keyword, /*separator_after=*/true);
  });
}

}  // namespace titan
