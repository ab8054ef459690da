#ifndef TITAN_LIB_RL_RL_CONFIG_H_
#define TITAN_LIB_RL_RL_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "lib/config/job_config.pb.h"
#include "lib/rl/losses.h"

namespace titan {

// The job titan_rl runs: `config` with [rl]'s founding-API keys applied to the trainer sections
// they stand for ([optimizer] lr = [rl] learning_rate, [training] seq_len = [rl] max_seq_len) and
// the algorithm's defaults filled in (dapo: clip_range_high 0.28, dynamic sampling). A trainer key
// set to a value that contradicts [rl], or one titan_rl has no use for ([training] dataset_path,
// [validation]), is refused with one line naming both.
absl::StatusOr<JobConfig> RlJobConfig(const JobConfig& config);

GroupStd GroupStdFromConfig(const JobConfig::Rl& rl);
KlEstimator KlEstimatorFromConfig(const JobConfig::Rl& rl);

// grpo, dapo and ppo: sampled rollouts scored by a reward (sft and dpo learn from given text).
bool IsPolicyGradient(const std::string& algorithm);

}  // namespace titan

#endif  // TITAN_LIB_RL_RL_CONFIG_H_
