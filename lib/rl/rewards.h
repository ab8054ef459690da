#ifndef TITAN_LIB_RL_REWARDS_H_
#define TITAN_LIB_RL_REWARDS_H_

// Rewards for responses: rule-based verifiers in C++ and an external scorer command. (A reward
// model is scored by lib/rl/rl_trainer.h's policy runtime.)

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace titan {

// The text after the response's last "####" (anywhere in it: unlike verl's numeric rule, not
// only in the last 300 characters), to the end of its line, stripped of surrounding whitespace;
// nullopt without one (or when it is empty).
std::optional<std::string> HashAnswer(const std::string& response);

// verl's strict GSM8K answer: the last match of "#### (-?[0-9.,]+)" within the response's last 300
// characters, commas removed ("#### 1,000 dollars" -> "1000"); nullopt without one.
std::optional<std::string> Gsm8kAnswer(const std::string& response);

// verl's gsm8k compute_score: 1 when Gsm8kAnswer equals `answer` as text (`answer` stripped and
// its commas removed, as verl's preprocessing stores it), else 0: "72.0" is not "72".
double NumericReward(const std::string& response, const std::string& answer);
// 1 when the response's HashAnswer (or, without "####", the whole response), stripped, equals
// `answer` stripped, else 0: nothing else is normalised on either side (commas count).
double ExactMatchReward(const std::string& response, const std::string& answer);
// 1 when the response holds a "#### answer", else 0.
double FormatReward(const std::string& response);

// Whether the reward `kind` names ([rl] reward) compares responses with the example's answer.
bool RewardNeedsAnswer(const std::string& kind);

// The verifier `kind` names ([rl] reward: "exact_match", "format", else "numeric").
double VerifierReward(const std::string& kind, const std::string& response,
                      const std::string& answer);

// Whether `reward` stays finite in float32, the update's precision (1e39 is finite in double).
bool FitsFloat32(double reward);

// OK when every reward is finite in float32 (FitsFloat32); else an error naming `source` and the
// first NaN, infinity or larger number (one would turn the loss, and then every weight, into NaN).
absl::Status CheckFiniteRewards(const std::vector<double>& rewards, absl::string_view source);

// One rollout as the scorer command sees it.
struct ScoredRollout {
  std::string prompt;
  std::string response;
  std::string answer;
};

// Runs `command` under /bin/sh, writes one JSON object per rollout (prompt, response, answer) to
// its stdin and reads one reward per line from its stdout. A command that exits non-zero, prints
// a wrong number of lines or anything but a decimal number finite in float32 (FitsFloat32), a
// line over 1 MiB (killed once it passes that), a line past the rollouts' count (killed once it
// ends: one call reads at most a line per rollout and one more) or runs past `timeout` (then
// killed) is an error that names it and quotes its stderr's end (bad lines shortened, QuotedShort);
// the caller keeps the rollouts. `stop_signal` (polled every 100 ms) returning a signal number
// kills it at once too: a CancelledError naming the signal. The command runs in its own process
// group with only stdin, stdout and stderr open, and is killed if this process dies.
absl::StatusOr<std::vector<double>> ScoreWithCommand(
    const std::string& command, const std::vector<ScoredRollout>& rollouts, absl::Duration timeout,
    const std::function<int()>& stop_signal = nullptr);

}  // namespace titan

#endif  // TITAN_LIB_RL_REWARDS_H_
