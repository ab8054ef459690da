#ifndef TITAN_LIB_DISTRIBUTED_RANK_OUTPUT_H_
#define TITAN_LIB_DISTRIBUTED_RANK_OUTPUT_H_

// How the launcher passes its ranks' output on: line by line with a "[rank N] " prefix, failure
// messages held back and said once for all the ranks that printed them. Private to :launcher.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace titan {

// The ranks' failure messages (LaunchOptions::failure_line_prefix): a failure line and the lines
// after it that are not log lines (a scorer's traceback quoted in it), in rank order, each with
// the ranks that printed it.
class FailureLines {
 public:
  explicit FailureLines(std::string prefix) : prefix_(std::move(prefix)) {}

  // Keeps `line` (its newline included) when it starts or continues `rank`'s failure message;
  // false when it is not one.
  bool Hold(int rank, absl::string_view line);

  // The first line of `rank`'s message without the prefix; "" when it printed none.
  std::string FirstLine(int rank) const;

  // Each distinct message once, every line of it as "[rank 2] <line>" or "[ranks 0-1,3] <line>".
  std::string Text() const;

 private:
  std::string prefix_;
  std::map<int, std::string> messages_;  // by rank
};

// One rank's output stream, passed through line by line with its prefix ("[rank N] ", or none).
struct RankStream {
  int fd = -1;
  int target_fd = 1;
  std::string prefix;
  std::string pending;
  int rank = -1;
  FailureLines* failure_lines = nullptr;  // stderr's: where its failure lines are held
};

// Writes the stream's complete lines (and with `flush` its tail) to its target.
absl::Status EmitLines(RankStream& stream, bool flush);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_RANK_OUTPUT_H_
