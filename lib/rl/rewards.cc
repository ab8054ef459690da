#include "lib/rl/rewards.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "lib/util/redact.h"
#include "lib/util/short_text.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

constexpr size_t kTail = 300;

// verl's scorers look at the response's last kTail characters only (Python's str[-300:]: code
// points, so a UTF-8 character is never split).
absl::string_view Tail(absl::string_view response) {
  size_t start = response.size();
  for (size_t characters = 0; start > 0 && characters < kTail; ++characters) {
    do {
      --start;
    } while (start > 0 && (static_cast<unsigned char>(response[start]) & 0xC0) == 0x80);
  }
  return response.substr(start);
}

// The characters of verl's strict GSM8K answer, [0-9.,].
bool IsGsm8kChar(char c) { return absl::ascii_isdigit(c) || c == '.' || c == ','; }

// A decimal number: optional sign, digits with an optional point, an optional exponent ("1",
// "-0.5", "1e-3"); not hex, inf or nan, which SimpleAtod (strtod) reads too.
bool IsDecimal(absl::string_view text) {
  size_t i = 0;
  auto sign = [&] { i += i < text.size() && (text[i] == '+' || text[i] == '-'); };
  auto digits = [&] {
    const size_t start = i;
    while (i < text.size() && absl::ascii_isdigit(text[i])) ++i;
    return i - start;
  };
  sign();
  size_t mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    sign();
    if (digits() == 0) return false;
  }
  return i == text.size();
}

// The scorer's process group leader: runs `command` under /bin/sh in a child and exits as it does.
// When `parent` (titan_rl) dies, even by SIGKILL, PR_SET_PDEATHSIG tells it and it kills the whole
// group: the shell's own children too (dash runs "sh -c script.sh" as a child, not by exec).
[[noreturn]] void SuperviseScorer(const char* command, pid_t parent) {
  struct sigaction kill_group = {};
  kill_group.sa_handler = [](int) { ::kill(0, SIGKILL); };
  ::sigaction(SIGTERM, &kill_group, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != parent) ::kill(0, SIGKILL);  // titan_rl died before prctl
  const pid_t shell = ::fork();
  if (shell == 0) {
    ::signal(SIGPIPE, SIG_DFL);  // titan_rl ignores it; exec would keep it ignored
    ::execl("/bin/sh", "sh", "-c", command, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(shell, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    // The shell's own status: "failed (signal N)" names the signal that ended it.
    ::signal(WTERMSIG(status), SIG_DFL);
    ::raise(WTERMSIG(status));
  }
  ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 127);
}

// A reward is a short line: a longer one is refused as soon as it passes this bound, not read
// whole into memory (a scorer stuck printing without a newline would fill it). A line past the
// rollouts' count is refused as it ends, so one call holds at most a line per rollout, one more,
// and this much of another.
constexpr size_t kMaxRewardLineBytes = 1 << 20;
// The last bytes of a scorer's stderr, which its errors quote: all of it that is kept.
constexpr size_t kStderrKept = 500;

constexpr absl::string_view kBeyondFloat32 =
    "beyond float32's range (magnitude at most 3.4e38), where the update computes: it would be "
    "infinite there";

}  // namespace

std::optional<std::string> HashAnswer(const std::string& response) {
  const size_t mark = response.rfind("####");
  if (mark == std::string::npos) return std::nullopt;
  // The answer runs to the end of its line.
  absl::string_view rest = absl::string_view(response).substr(mark + 4);
  rest = absl::StripAsciiWhitespace(rest.substr(0, rest.find('\n')));
  if (rest.empty()) return std::nullopt;
  return std::string(rest);
}

std::optional<std::string> Gsm8kAnswer(const std::string& response) {
  const absl::string_view tail = Tail(response);
  // re.findall's last match is the last "#### " followed by a number: matches cannot overlap.
  for (size_t mark = tail.rfind("#### "); mark != absl::string_view::npos;
       mark = mark == 0 ? absl::string_view::npos : tail.rfind("#### ", mark - 1)) {
    const size_t start = mark + 5;
    size_t end = start + (start < tail.size() && tail[start] == '-');
    const size_t digits = end;
    while (end < tail.size() && IsGsm8kChar(tail[end])) ++end;
    if (end > digits) return absl::StrReplaceAll(tail.substr(start, end - start), {{",", ""}});
  }
  return std::nullopt;
}

double NumericReward(const std::string& response, const std::string& answer) {
  const std::optional<std::string> given = Gsm8kAnswer(response);
  // verl compares strings; its GSM8K preprocessing stores the reference without commas.
  const std::string expected = absl::StrReplaceAll(absl::StripAsciiWhitespace(answer), {{",", ""}});
  return given && *given == expected ? 1 : 0;
}

double ExactMatchReward(const std::string& response, const std::string& answer) {
  const std::optional<std::string> given = HashAnswer(response);
  const absl::string_view text = given ? absl::string_view(*given) : absl::string_view(response);
  return absl::StripAsciiWhitespace(text) == absl::StripAsciiWhitespace(answer) ? 1 : 0;
}

double FormatReward(const std::string& response) { return HashAnswer(response) ? 1 : 0; }

bool RewardNeedsAnswer(const std::string& kind) {
  return kind == "numeric" || kind == "exact_match";
}

double VerifierReward(const std::string& kind, const std::string& response,
                      const std::string& answer) {
  if (kind == "exact_match") return ExactMatchReward(response, answer);
  if (kind == "format") return FormatReward(response);
  return NumericReward(response, answer);
}

bool FitsFloat32(double reward) { return std::abs(reward) <= std::numeric_limits<float>::max(); }

absl::Status CheckFiniteRewards(const std::vector<double>& rewards, absl::string_view source) {
  for (size_t i = 0; i < rewards.size(); ++i) {
    if (!std::isfinite(rewards[i])) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": reward ", i + 1, " of ",
                                                     rewards.size(), " is ", rewards[i],
                                                     ", expected a finite number"));
    }
    if (!FitsFloat32(rewards[i])) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": reward ", i + 1, " of ",
                                                     rewards.size(), " is ", rewards[i], ", ",
                                                     kBeyondFloat32));
    }
  }
  return absl::OkStatus();
}

namespace {

// ScoreWithCommand, its errors not yet redacted.
absl::StatusOr<std::vector<double>> RunScorer(const std::string& command,
                                              const std::vector<ScoredRollout>& rollouts,
                                              absl::Duration timeout,
                                              const std::function<int()>& stop_signal) {
  std::string input;
  for (const ScoredRollout& r : rollouts) {
    input += JsonText(
        nlohmann::json{{"prompt", r.prompt}, {"response", r.response}, {"answer", r.answer}});
    input += '\n';
  }
  int to_child[2], from_child[2], err_child[2];
  if (::pipe2(to_child, O_CLOEXEC) != 0 || ::pipe2(from_child, O_CLOEXEC) != 0 ||
      ::pipe2(err_child, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("[rl] reward_command: pipe: ", std::strerror(errno)));
  }
  const pid_t parent = ::getpid();
  const long open_max = ::sysconf(_SC_OPEN_MAX);  // before fork: not async-signal-safe
  const pid_t pid = ::fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("[rl] reward_command: fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group, so a timeout or a stop signal kills its children too
    ::dup2(to_child[0], 0);
    ::dup2(from_child[1], 1);
    ::dup2(err_child[1], 2);
    // Nothing else of titan's (metrics.jsonl, its libraries' pipes) reaches the scorer.
    if (::close_range(3, ~0U, 0) != 0) {
      for (long fd = 3; fd < open_max; ++fd) ::close(static_cast<int>(fd));
    }
    SuperviseScorer(command.c_str(), parent);
  }
  ::setpgid(pid, pid);  // also here: a stop right after fork must reach the group
  ::close(to_child[0]);
  ::close(from_child[1]);
  ::close(err_child[1]);
  for (int fd : {to_child[1], from_child[0], err_child[0]}) ::fcntl(fd, F_SETFL, O_NONBLOCK);
  ::signal(SIGPIPE, SIG_IGN);  // a scorer that exits early must not kill the trainer
  std::string out, err;
  size_t line_start = 0;  // where `out`'s last, unfinished line starts
  size_t written = 0;
  int write_fd = to_child[1];
  if (input.empty()) {
    ::close(write_fd);
    write_fd = -1;
  }
  const absl::Time deadline = absl::Now() + timeout;
  bool open_out = true, open_err = true, timed_out = false, line_too_long = false;
  bool too_many_lines = false;  // `out` ends with the line one past the rollouts' count
  size_t lines_ended = 0;       // newlines in `out`
  int stopped_by = 0;
  while ((open_out || open_err) && !line_too_long && !too_many_lines) {
    if (stop_signal && (stopped_by = stop_signal()) != 0) break;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      break;
    }
    pollfd fds[3] = {{from_child[0], 0, 0}, {err_child[0], 0, 0}, {write_fd, POLLOUT, 0}};
    if (open_out) fds[0].events = POLLIN;
    if (open_err) fds[1].events = POLLIN;
    const int n = write_fd >= 0 ? 3 : 2;
    // At most 100 ms: a stop signal may interrupt another thread, not this poll.
    const int64_t wait_ms = std::clamp<int64_t>(absl::ToInt64Milliseconds(left), 1, 100);
    ::poll(fds, n, static_cast<int>(wait_ms));
    char buffer[4096];
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents == 0) continue;
      const ssize_t got = ::read(fds[i].fd, buffer, sizeof(buffer));
      if (got > 0 && i == 0) {
        absl::string_view chunk(buffer, got);
        // A scorer printing endless short lines is stopped at the first line too many.
        for (size_t at = chunk.find('\n'); at != absl::string_view::npos && !too_many_lines;
             at = chunk.find('\n', at + 1)) {
          too_many_lines = ++lines_ended > rollouts.size();
          if (too_many_lines) chunk = chunk.substr(0, at + 1);
        }
        out.append(chunk.data(), chunk.size());
        const size_t newline = chunk.rfind('\n');
        if (newline != absl::string_view::npos) {
          line_start = out.size() - chunk.size() + newline + 1;
        }
        line_too_long = out.size() - line_start > kMaxRewardLineBytes;
      } else if (got > 0) {
        err.append(buffer, got);
        if (err.size() > kStderrKept) err.erase(0, err.size() - kStderrKept);
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        (i == 0 ? open_out : open_err) = false;
      }
    }
    if (write_fd >= 0 && fds[2].revents != 0) {
      const ssize_t put = ::write(write_fd, input.data() + written, input.size() - written);
      if (put > 0) written += put;
      if (written == input.size() || (put < 0 && errno != EAGAIN && errno != EINTR)) {
        ::close(write_fd);
        write_fd = -1;
      }
    }
  }
  if (write_fd >= 0) ::close(write_fd);
  ::close(from_child[0]);
  ::close(err_child[0]);
  if (timed_out || stopped_by != 0 || line_too_long || too_many_lines) ::kill(-pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (stopped_by != 0) {
    return absl::CancelledError(absl::StrCat(
        "[rl] reward_command \"", command, "\" was killed: titan_rl received signal ", stopped_by));
  }
  if (line_too_long) {
    return absl::InvalidArgumentError(
        absl::StrCat("[rl] reward_command \"", command, "\" printed over ", kMaxRewardLineBytes,
                     " bytes on line ", std::count(out.begin(), out.begin() + line_start, '\n') + 1,
                     " (killed), expected one finite decimal number per line"));
  }
  const std::string quoted =
      err.empty() ? "" : absl::StrCat("; its stderr: ", absl::StripAsciiWhitespace(err));
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        "[rl] reward_command \"", command, "\" took longer than ",
        absl::FormatDuration(timeout), " for ", rollouts.size(), " rollouts (killed)", quoted));
  }
  // Killed for its extra line: its lines are checked below, then their count.
  if (!too_many_lines && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
    return absl::InternalError(absl::StrCat(
        "[rl] reward_command \"", command, "\" failed (",
        WIFEXITED(status) ? absl::StrCat("exit status ", WEXITSTATUS(status))
                          : absl::StrCat("signal ", WTERMSIG(status)),
        ")", quoted));
  }
  std::vector<double> rewards;
  std::vector<absl::string_view> lines = absl::StrSplit(out, '\n');
  if (lines.back().empty()) lines.pop_back();  // the last line's newline
  for (size_t i = 0; i < lines.size(); ++i) {
    const absl::string_view text = absl::StripAsciiWhitespace(lines[i]);
    double value = 0;
    // A blank line is refused too: skipping it would shift every later reward onto another rollout.
    if (!IsDecimal(text) || !absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("[rl] reward_command \"", command, "\" printed ", QuotedShort(lines[i]),
                       " on line ", i + 1, ", expected one finite decimal number per line"));
    }
    if (!FitsFloat32(value)) {
      return absl::InvalidArgumentError(absl::StrCat("[rl] reward_command \"", command,
                                                     "\" printed ", QuotedShort(lines[i]),
                                                     " on line ", i + 1, ", ", kBeyondFloat32));
    }
    rewards.push_back(value);
  }
  if (too_many_lines) {
    return absl::InvalidArgumentError(
        absl::StrCat("[rl] reward_command \"", command, "\" printed more than ", rollouts.size(),
                     " lines for ", rollouts.size(), " rollouts (killed at line ", rewards.size(),
                     "), expected one finite decimal number per rollout"));
  }
  if (rewards.size() != rollouts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("[rl] reward_command \"", command, "\" printed ",
                                                   rewards.size(), " rewards for ",
                                                   rollouts.size(), " rollouts"));
  }
  return rewards;
}

}  // namespace

absl::StatusOr<std::vector<double>> ScoreWithCommand(const std::string& command,
                                                     const std::vector<ScoredRollout>& rollouts,
                                                     absl::Duration timeout,
                                                     const std::function<int()>& stop_signal) {
  absl::StatusOr<std::vector<double>> rewards = RunScorer(command, rollouts, timeout, stop_signal);
  // The command, or what the scorer printed, may hold credentials: never shown.
  if (!rewards.ok()) {
    return absl::Status(rewards.status().code(), RedactSecretsIn(rewards.status().message()));
  }
  return rewards;
}

}  // namespace titan
