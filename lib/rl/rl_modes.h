#ifndef TITAN_LIB_RL_RL_MODES_H_
#define TITAN_LIB_RL_RL_MODES_H_

#include <string>

#include "absl/status/statusor.h"
#include "lib/config/job_config.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/rl/rl_trainer.h"
#include "nlohmann/json.hpp"

namespace titan {

// titan_rl's modes besides training (--generate, --step_rollouts) as library calls; with several
// ranks every rank calls them, and each returns the same summary (totals over the ranks).

// Where --generate writes: `output_flag`, or <dump_folder>/generations.jsonl when empty. Refused
// when that is a directory or one of the [rl] prompts files it reads. Call before the model loads.
absl::StatusOr<std::string> GenerationOutputPath(const JobConfig& config,
                                                 const std::string& output_flag);

// What `trainer`'s policy weights are, for the summary's "weights_from": RlTrainer::weights_from(),
// or "random initialisation". A random one is refused unless `random_weights` (--random_weights),
// then a WARNING: a mistyped dump folder would otherwise sample from, or update, a random model.
// `random_weights` with weights to load is refused too: they would replace the random policy.
absl::StatusOr<std::string> PolicyWeightsFrom(const RlTrainer& trainer, const JobConfig& config,
                                              bool random_weights);

// Samples responses to [rl] prompts_path (or the held-out prompts) with the policy, rank r taking
// every world-th prompt, and writes them to `output` as JSONL (prompt, ids, response, log-probs),
// one file in prompt order. Returns output, prompts, generated_tokens, decode_steps, seconds,
// cpu_seconds and tokens_per_second.
absl::StatusOr<nlohmann::json> GenerateToFile(RlTrainer& trainer, const JobConfig& config,
                                              const DistributedRuntime& runtime,
                                              const std::string& output);

// One update on the rollouts in the JSONL file `path` (prompt, response, reward; rank r takes the
// r-th equal contiguous share) and writes the policy to <dump_folder>/step_weights.safetensors,
// or with `save_as_next_step` (--save_step; `trainer` made in RlMode::kStepRolloutsSaved) saves
// the update as the run's next checkpoint step. Returns loss, grad_norm, weights (the file, or
// the step folder) and the step's metrics (and its step).
absl::StatusOr<nlohmann::json> StepOnRolloutsFile(RlTrainer& trainer, const JobConfig& config,
                                                  const DistributedRuntime& runtime,
                                                  const std::string& path, bool save_as_next_step);

}  // namespace titan

#endif  // TITAN_LIB_RL_RL_MODES_H_
