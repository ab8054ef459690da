#include "lib/distributed/rank_output.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

// "0-2,5": sorted ranks with runs collapsed.
std::string RankRanges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(ranks[i]) : absl::StrCat(ranks[i], "-", ranks[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

// glog's "I20261205 12:00:00.000000 ..." (and W, E, F): another log line, not the message's.
bool IsLogLine(absl::string_view line) {
  return line.size() > 5 && absl::StrContains("IWEF", line[0]) &&
         std::all_of(line.begin() + 1, line.begin() + 5, absl::ascii_isdigit);
}

}  // namespace

bool FailureLines::Hold(int rank, absl::string_view line) {
  if (prefix_.empty()) return false;
  if (absl::StartsWith(line, prefix_)) {
    absl::StrAppend(&messages_[rank], line);
    return true;
  }
  if (messages_.count(rank) == 0 || IsLogLine(line)) return false;
  absl::StrAppend(&messages_[rank], line);
  return true;
}

std::string FailureLines::FirstLine(int rank) const {
  const auto it = messages_.find(rank);
  if (it == messages_.end()) return "";
  absl::string_view line = it->second;
  line = line.substr(0, line.find('\n'));
  absl::ConsumePrefix(&line, prefix_);
  return std::string(line);
}

std::string FailureLines::Text() const {
  std::vector<std::pair<std::string, std::vector<int>>> distinct;
  for (const auto& [rank, message] : messages_) {
    auto same = std::find_if(distinct.begin(), distinct.end(),
                             [&](const auto& held) { return held.first == message; });
    if (same == distinct.end()) {
      distinct.push_back({message, {rank}});
    } else {
      same->second.push_back(rank);
    }
  }
  std::string out;
  for (const auto& [message, ranks] : distinct) {
    const std::string prefix =
        absl::StrCat("[rank", ranks.size() > 1 ? "s " : " ", RankRanges(ranks), "] ");
    for (absl::string_view line : absl::StrSplit(message, '\n', absl::SkipEmpty())) {
      absl::StrAppend(&out, prefix, line, "\n");
    }
  }
  return out;
}

absl::Status EmitLines(RankStream& stream, bool flush) {
  const std::string& prefix = stream.prefix;
  size_t start = 0;
  std::string out;
  auto add_line = [&](absl::string_view line) {
    if (stream.failure_lines == nullptr || !stream.failure_lines->Hold(stream.rank, line)) {
      absl::StrAppend(&out, prefix, line);
    }
  };
  for (size_t nl = stream.pending.find('\n'); nl != std::string::npos;
       nl = stream.pending.find('\n', start)) {
    add_line(absl::string_view(stream.pending).substr(start, nl + 1 - start));
    start = nl + 1;
  }
  stream.pending.erase(0, start);
  if (flush && !stream.pending.empty()) {
    add_line(absl::StrCat(stream.pending, "\n"));
    stream.pending.clear();
  }
  return WriteFully(stream.target_fd, out, stream.target_fd == STDOUT_FILENO ? "stdout" : "stderr");
}

}  // namespace titan
