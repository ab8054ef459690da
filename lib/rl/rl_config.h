#ifndef TITAN_LIB_RL_RL_CONFIG_H_
#define TITAN_LIB_RL_RL_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "lib/config/job_config.pb.h"
#include "lib/rl/losses.h"

namespace titan {

// What titan_rl does with a job: train, one update on given rollouts (--step_rollouts, whose keys
// are checked as training's; kStepRolloutsSaved with --save_step: the update is saved as the run's
// next step), or sample alone (--generate, which reads [rl]'s sampling keys and prompts-only
// examples whatever the algorithm).
enum class RlMode { kTrain, kStepRollouts, kStepRolloutsSaved, kGenerate };

// kStepRollouts or kStepRolloutsSaved: the rollouts are given, not sampled.
bool OnGivenRollouts(RlMode mode);

// The job titan_rl runs: `config` with [rl]'s founding-API keys applied to the trainer sections
// they stand for ([optimizer] lr = [rl] learning_rate, [training] seq_len = [rl] max_seq_len) and
// the algorithm's defaults filled in (dapo: clip_range_high 0.28, dynamic sampling). A trainer key
// set to a value that contradicts [rl], one titan_rl has no use for ([training] dataset_path,
// [validation]), or an [rl] key other than its default that the algorithm and settings do not
// read in `mode`, is refused with one line naming it. Keys are compared with their defaults, not
// tested for presence: the config.toml titan_rl writes spells every key out and runs again.
absl::StatusOr<JobConfig> RlJobConfig(const JobConfig& config, RlMode mode);

// [training] dataset, dataset_path, dataset_text_field and global_batch_size, and any [validation]
// key, set to anything but their defaults, refused with one line: titan_rl's data are [rl]'s. Part
// of RlJobConfig, and titan_rl's first check: ValidateJobConfig's own checks of these keys would
// otherwise ask for a key that titan_rl then refuses (a dataset_path for dataset "c4").
absl::Status RefuseTrainerDataKeys(const JobConfig& config);

GroupStd GroupStdFromConfig(const JobConfig::Rl& rl);
KlEstimator KlEstimatorFromConfig(const JobConfig::Rl& rl);

// grpo, dapo and ppo: sampled rollouts scored by a reward (sft and dpo learn from given text).
bool IsPolicyGradient(const std::string& algorithm);

}  // namespace titan

#endif  // TITAN_LIB_RL_RL_CONFIG_H_
