#include "lib/rl/rl_config.h"

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace titan {

absl::StatusOr<JobConfig> RlJobConfig(const JobConfig& config) {
  JobConfig out = config;
  JobConfig::Rl& rl = *out.mutable_rl();
  if (config.optimizer().has_lr() && config.optimizer().lr() != rl.learning_rate()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[optimizer] lr = ", config.optimizer().lr(), " contradicts [rl] learning_rate = ",
        rl.learning_rate(), ": titan_rl trains at [rl] learning_rate; set only that one"));
  }
  out.mutable_optimizer()->set_lr(rl.learning_rate());
  if (config.training().has_seq_len() && config.training().seq_len() != rl.max_seq_len()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[training] seq_len = ", config.training().seq_len(), " contradicts [rl] max_seq_len = ",
        rl.max_seq_len(), ": titan_rl's sequences are prompt + response; set only [rl] max_seq_len"));
  }
  out.mutable_training()->set_seq_len(rl.max_seq_len());
  if (config.training().has_dataset_path() || config.training().has_dataset() ||
      config.training().has_dataset_text_field()) {
    return absl::InvalidArgumentError(
        "[training] dataset/dataset_path/dataset_text_field: titan_rl reads [rl] prompts_path "
        "(or generates [rl] task); remove them");
  }
  if (config.validation().enable()) {
    return absl::InvalidArgumentError(
        "[validation] enable: titan_rl evaluates [rl] eval_prompts_path (or the task's held-out "
        "split) every [rl] eval_freq steps instead; remove it");
  }
  const JobConfig::Parallelism& p = config.parallelism();
  if (p.tensor_parallel_degree() > 1 || p.context_parallel_degree() > 1 ||
      p.pipeline_parallel_degree() > 1) {
    return absl::UnimplementedError(
        "[parallelism] tensor/context/pipeline_parallel_degree > 1: titan_rl shards the policy "
        "with data parallelism only (DDP, FSDP, HSDP); set them to 1");
  }
  if (config.compile().cuda_graph()) {
    return absl::UnimplementedError(
        "[compile] cuda_graph: titan_rl's batches change shape and token counts every step; "
        "CUDA graphs need static ones. Set it to false");
  }
  if (config.model().converters_size() > 0) {
    return absl::UnimplementedError(
        "[model] converters: titan_rl trains in high precision only (float8 would widen the gap "
        "between the generator's and the trainer's log-probabilities); remove them");
  }
  if (!rl.has_clip_range_high()) {
    rl.set_clip_range_high(rl.algorithm() == "dapo" ? 0.28 : rl.clip_range());
  }
  if (!rl.has_dynamic_sampling() && rl.algorithm() == "dapo") rl.set_dynamic_sampling(true);
  if ((rl.reward() == "command") != !rl.reward_command().empty()) {
    return absl::InvalidArgumentError(
        "[rl] reward = \"command\" and [rl] reward_command: set both or neither");
  }
  if (rl.reward() != "command" &&
      rl.reward_timeout_seconds() != JobConfig::Rl().reward_timeout_seconds()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[rl] reward_timeout_seconds = ", rl.reward_timeout_seconds(),
        ": only reward = \"command\" has a timeout, reward is \"", rl.reward(), "\"; remove it"));
  }
  if ((rl.reward() == "reward_model") != !rl.reward_model_path().empty()) {
    return absl::InvalidArgumentError(
        "[rl] reward = \"reward_model\" and [rl] reward_model_path: set both or neither");
  }
  if (rl.task().empty() && rl.prompts_path().empty()) {
    return absl::InvalidArgumentError("[rl] needs prompts_path or a bundled task");
  }
  if (rl.max_new_tokens() >= rl.max_seq_len()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[rl] max_new_tokens = ", rl.max_new_tokens(), " must be below max_seq_len = ",
                     rl.max_seq_len(), " (prompt + response tokens), leaving room for the prompt"));
  }
  if (!absl::StrContains(rl.chat_template(), "{prompt}")) {
    return absl::InvalidArgumentError(absl::StrCat("[rl] chat_template = \"",
                                                   absl::CEscape(rl.chat_template()),
                                                   "\": expected a {prompt} placeholder"));
  }
  if (rl.overlong_buffer_len() >= rl.max_new_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[rl] overlong_buffer_len = ", rl.overlong_buffer_len(),
        " must be below max_new_tokens = ", rl.max_new_tokens()));
  }
  return out;
}

GroupStd GroupStdFromConfig(const JobConfig::Rl& rl) {
  if (rl.advantage_std() == "bessel") return GroupStd::kBessel;
  return rl.advantage_std() == "none" ? GroupStd::kNone : GroupStd::kPopulation;
}

KlEstimator KlEstimatorFromConfig(const JobConfig::Rl& rl) {
  return rl.kl_estimator() == "k1" ? KlEstimator::kK1 : KlEstimator::kK3;
}

bool IsPolicyGradient(const std::string& algorithm) {
  return algorithm == "grpo" || algorithm == "dapo" || algorithm == "ppo";
}

}  // namespace titan
