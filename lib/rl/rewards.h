#ifndef TITAN_LIB_RL_REWARDS_H_
#define TITAN_LIB_RL_REWARDS_H_

// Rewards for responses: rule-based verifiers in C++ and an external scorer command. (A reward
// model is scored by lib/rl/rl_trainer.h's policy runtime.)

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace titan {

// GSM8K's convention (verl's gsm8k scorer): the answer after the last "####" within the
// response's last 300 characters, commas removed; nullopt without one.
std::optional<std::string> HashAnswer(const std::string& response);

// 1 when HashAnswer is a number equal to `answer`'s, else 0.
double NumericReward(const std::string& response, const std::string& answer);
// 1 when the response's HashAnswer (or, without "####", the whole response), stripped, equals
// `answer` stripped, else 0.
double ExactMatchReward(const std::string& response, const std::string& answer);
// 1 when the response holds a "#### answer", else 0.
double FormatReward(const std::string& response);

// Whether the reward `kind` names ([rl] reward) compares responses with the example's answer.
bool RewardNeedsAnswer(const std::string& kind);

// The verifier `kind` names ([rl] reward: "exact_match", "format", else "numeric").
double VerifierReward(const std::string& kind, const std::string& response,
                      const std::string& answer);

// OK when every reward is finite; else an error naming `source` and the first NaN or infinity
// (one would turn the loss, and then every weight, into NaN).
absl::Status CheckFiniteRewards(const std::vector<double>& rewards, absl::string_view source);

// One rollout as the scorer command sees it.
struct ScoredRollout {
  std::string prompt;
  std::string response;
  std::string answer;
};

// Runs `command` under /bin/sh, writes one JSON object per rollout (prompt, response, answer) to
// its stdin and reads one reward per line from its stdout. A command that exits non-zero, prints
// a wrong number of lines or anything but a finite number, or runs past `timeout` (then killed) is
// an error that names it and quotes its stderr; the caller keeps the rollouts.
absl::StatusOr<std::vector<double>> ScoreWithCommand(const std::string& command,
                                                     const std::vector<ScoredRollout>& rollouts,
                                                     absl::Duration timeout);

}  // namespace titan

#endif  // TITAN_LIB_RL_REWARDS_H_
