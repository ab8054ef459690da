#include "lib/rl/rl_config.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/config/adam_scalars.h"
#include "lib/config/field_value.h"
#include "lib/config/job_config.h"

namespace titan {
namespace {

// An [rl] key and whether the algorithm and settings read it; `why` says which do.
struct RlKeyUse {
  const char* key;
  bool read;
  std::string why;
};

// The first key of `uses` that is not read yet differs from its default, refused by name: it
// would change nothing. Defaults, not presence: config.toml spells every key out.
absl::Status RefuseUnreadKeys(const JobConfig& config, const std::vector<RlKeyUse>& uses) {
  for (const RlKeyUse& use : uses) {
    if (use.read) continue;
    if (const std::optional<std::string> set = ChangedKey(config, "rl", use.key)) {
      return absl::InvalidArgumentError(absl::StrCat(*set, ": ", use.why, "; remove it"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RefuseTrainerDataKeys(const JobConfig& config) {
  const JobConfig::Training training_defaults;
  // The first one set leads the message, so that its source (file:line or flag) is named.
  const std::pair<const char*, bool> data_keys[] = {
      {"dataset", config.training().dataset() != training_defaults.dataset()},
      {"dataset_path", config.training().dataset_path() != training_defaults.dataset_path()},
      {"dataset_text_field",
       config.training().dataset_text_field() != training_defaults.dataset_text_field()}};
  for (const auto& [key, changed] : data_keys) {
    if (!changed) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("[training] ", key,
                     ": titan_rl reads [rl] prompts_path (or generates [rl] task), not "
                     "[training] dataset/dataset_path/dataset_text_field; remove them"));
  }
  if (config.training().global_batch_size() != training_defaults.global_batch_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[training] global_batch_size = ", config.training().global_batch_size(),
                     ": titan_rl's batch is [rl] prompts_per_step (times group_size), run in "
                     "local_batch_size microbatches; remove it"));
  }
  if (const std::vector<std::string> changed = ChangedKeys(config, "validation");
      !changed.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(changed.front(),
                     ": titan_rl evaluates [rl] eval_prompts_path (or the task's held-out "
                     "split) every [rl] eval_freq steps instead of [validation]; remove it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobConfig> RlJobConfig(const JobConfig& config, RlMode mode) {
  JobConfig out = config;
  JobConfig::Rl& rl = *out.mutable_rl();
  if (config.optimizer().has_lr() && config.optimizer().lr() != rl.learning_rate()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[optimizer] lr = ", config.optimizer().lr(), " contradicts [rl] learning_rate = ",
        rl.learning_rate(), ": titan_rl trains at [rl] learning_rate; set only that one"));
  }
  out.mutable_optimizer()->set_lr(rl.learning_rate());
  const JobConfig::Optimizer& optimizer = out.optimizer();
  if (const std::string past =
          AdamScalarsPastFloat32(rl.learning_rate(), optimizer.beta1(), optimizer.weight_decay(),
                                 optimizer.name() == "AdamW");
      !past.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[rl] learning_rate = ", FormatNumber(rl.learning_rate()), ": ", past,
                     "; expected a smaller lr"));
  }
  if (config.training().has_seq_len() && config.training().seq_len() != rl.max_seq_len()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[training] seq_len = ", config.training().seq_len(),
                     " contradicts [rl] max_seq_len = ", rl.max_seq_len(),
                     ": titan_rl's sequences are prompt + response; set only [rl] max_seq_len"));
  }
  out.mutable_training()->set_seq_len(rl.max_seq_len());
  if (absl::Status status = RefuseTrainerDataKeys(config); !status.ok()) return status;
  const JobConfig::Parallelism& p = config.parallelism();
  for (const auto& [key, degree] :
       {std::pair{"tensor_parallel_degree", p.tensor_parallel_degree()},
        std::pair{"context_parallel_degree", p.context_parallel_degree()},
        std::pair{"pipeline_parallel_degree", p.pipeline_parallel_degree()}}) {
    if (degree <= 1) continue;
    return absl::UnimplementedError(absl::StrCat(
        "[parallelism] ", key, " = ", degree,
        ": titan_rl shards the policy with data parallelism only (DDP, FSDP, HSDP); set it to 1"));
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
  if (const std::optional<std::string> set = ChangedKey(config, "model", "attn_mask_type")) {
    return absl::InvalidArgumentError(
        absl::StrCat(*set,
                     ": titan_rl's sequences are one prompt + response each, nothing packed, so "
                     "there are no documents to mask apart; remove it"));
  }
  const std::string& algorithm = rl.algorithm();
  const bool policy_gradient = IsPolicyGradient(algorithm);
  const bool groups = algorithm == "grpo" || algorithm == "dapo";
  const std::string is = absl::StrCat(", algorithm is \"", algorithm, "\"");
  const std::string sampled = absl::StrCat("only grpo, dapo and ppo sample rollouts", is);
  const std::string sampling =
      absl::StrCat("sft and dpo sample nothing (titan_rl --generate does)", is);
  const std::string grouped = absl::StrCat("only grpo and dapo normalise rewards by group", is);
  const std::string gae = absl::StrCat("only ppo has a value head and GAE", is);
  const bool generate = mode == RlMode::kGenerate;
  const bool samples = policy_gradient || generate;
  // transformers' generate warns the same: top_k and top_p filter only what is sampled.
  const std::string greedy =
      "only sampling (temperature > 0) keeps the top_k tokens or the top_p nucleus, temperature "
      "is 0 (greedy: the most likely token)";
  const bool held_out = !rl.task().empty() || !rl.eval_prompts_path().empty();
  const std::string no_held_out =
      "and there is none (give [rl] eval_prompts_path, or a bundled task for its split)";
  // Before the keys and the rollouts file's shape, which are the wrong algorithm's to check.
  if (OnGivenRollouts(mode) && !policy_gradient) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--step_rollouts updates on scored rollouts: [rl] algorithm must be grpo, dapo or ppo, "
        "not ",
        algorithm, " (sft and dpo learn from the examples of [rl] prompts_path)"));
  }
  if (mode == RlMode::kStepRolloutsSaved && !config.checkpoint().enable()) {
    return absl::InvalidArgumentError(
        "--save_step saves the update as the run's next checkpoint step: set [checkpoint] "
        "enable = true");
  }
  if (absl::Status status = RefuseUnreadKeys(
          config,
          {{"ppo_epochs", policy_gradient, sampled},
           {"minibatch_size", policy_gradient, sampled},
           {"clip_range", policy_gradient, sampled},
           {"clip_range_high", policy_gradient, sampled},
           {"group_size", policy_gradient, sampled},
           {"old_logprobs", policy_gradient, sampled},
           {"overlong_buffer_len", policy_gradient, sampled},
           {"kl_coef", policy_gradient,
            absl::StrCat("only grpo, dapo and ppo weigh a KL to the reference (dpo: beta)", is)},
           {"temperature", policy_gradient || generate, sampling},
           {"top_k", samples && rl.temperature() != 0, samples ? greedy : sampling},
           {"top_p", samples && rl.temperature() != 0, samples ? greedy : sampling},
           {"advantage_std", groups, grouped},
           {"advantage_eps", groups && rl.advantage_std() != "none",
            groups ? "only a std division (advantage_std population or bessel) adds it, "
                     "advantage_std is \"none\""
                   : grouped},
           {"dynamic_sampling", groups, grouped},
           {"gamma", algorithm == "ppo", gae},
           {"lam", algorithm == "ppo", gae},
           {"vf_coef", algorithm == "ppo", gae},
           {"value_clip_range", algorithm == "ppo", gae},
           {"whiten_advantages", algorithm == "ppo", gae},
           {"beta", algorithm == "dpo", absl::StrCat("only dpo has a preference loss", is)},
           {"dpo_loss", algorithm == "dpo", absl::StrCat("only dpo has a preference loss", is)},
           {"reward", policy_gradient || (algorithm == "sft" && held_out),
            algorithm == "dpo" ? "dpo learns from preference pairs and scores no response"
                               : absl::StrCat("sft scores only held-out responses, ", no_held_out)},
           {"kl_estimator", policy_gradient && rl.kl_coef() > 0,
            "only a KL penalty (grpo, dapo, ppo with kl_coef > 0) estimates a KL"},
           {"overlong_penalty_factor", rl.overlong_buffer_len() > 0,
            "only an overlong buffer (overlong_buffer_len > 0) has a penalty"},
           {"eval_size", !rl.task().empty() && rl.eval_prompts_path().empty(),
            rl.eval_prompts_path().empty()
                ? "only a bundled [rl] task's generated held-out split has a size, task is \"\""
                : absl::StrCat("[rl] eval_prompts_path = ", rl.eval_prompts_path(),
                               " is the held-out set; eval_size sizes only a bundled task's "
                               "generated one")},
           {"eval_freq", held_out, absl::StrCat("only a held-out set is evaluated, ", no_held_out)},
           {"reward_timeout_seconds", rl.reward() == "command",
            absl::StrCat("only reward = \"command\" has a timeout, reward is \"", rl.reward(),
                         "\"")}});
      !status.ok()) {
    return status;
  }
  // -1 is the sentinel whether left out or spelled out (config.toml spells it out).
  if (policy_gradient && rl.clip_range_high() == -1) {
    rl.set_clip_range_high(algorithm == "dapo" ? 0.28 : rl.clip_range());
  }
  if (!rl.has_dynamic_sampling() && algorithm == "dapo") rl.set_dynamic_sampling(true);
  if (rl.top_p() == 0) {
    return absl::InvalidArgumentError(
        "[rl] top_p = 0: must be in (0, 1]; a nucleus of probability 0 holds no token");
  }
  if (algorithm == "dpo" && rl.beta() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[rl] beta = ", rl.beta(),
        ": must be > 0 (sigmoid: beta·margin at 0 learns nothing; ipo: the margin target is 1 / "
        "(2 beta))"));
  }
  if (groups && rl.advantage_std() == "bessel" && rl.group_size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[rl] advantage_std = \"bessel\" divides by group_size - 1: needs group_size >= 2, not ",
        rl.group_size()));
  }
  if (groups && rl.advantage_std() != "none" && rl.advantage_eps() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("[rl] advantage_eps = ", rl.advantage_eps(),
                     ": must be > 0 with advantage_std = \"", rl.advantage_std(),
                     "\", which divides by std + advantage_eps (0 for a group of equal "
                     "rewards)"));
  }
  if (groups && mode != RlMode::kGenerate && rl.group_size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[rl] group_size = ", rl.group_size(), ": ", algorithm,
        "'s advantage is a response's reward minus its group's mean, 0 in a group of one: the run "
        "would never learn; use group_size >= 2 (or ppo, whose advantages come from its value "
        "head)"));
  }
  if (!OnGivenRollouts(mode) && rl.temperature() > 0 && rl.temperature() < 1e-5) {
    // vLLM's threshold: logits / temperature overflow float32 long before 0.
    return absl::InvalidArgumentError(
        absl::StrCat("[rl] temperature = ", rl.temperature(),
                     ": below 1e-5 the scaled logits overflow; use 0 for greedy sampling"));
  }
  // Greedy groups are group_size copies of one response: equal rewards, advantages all 0. PPO's
  // advantages come from its value head (GAE), not from its group, so it still learns.
  if (groups && mode == RlMode::kTrain && rl.temperature() == 0 && rl.group_size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[rl] temperature = 0 with [rl] group_size = ", rl.group_size(), ": ", algorithm,
        " would sample each group's responses greedily, all the same, so their rewards are equal "
        "and every advantage (r - group mean) is 0: the run would never learn. Set temperature > "
        "0 (1.0 samples the model's distribution); titan_rl --generate samples greedily"));
  }
  if ((rl.reward() == "command") != !rl.reward_command().empty()) {
    return absl::InvalidArgumentError(
        "[rl] reward = \"command\" and [rl] reward_command: set both or neither");
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

bool OnGivenRollouts(RlMode mode) {
  return mode == RlMode::kStepRollouts || mode == RlMode::kStepRolloutsSaved;
}

bool IsPolicyGradient(const std::string& algorithm) {
  return algorithm == "grpo" || algorithm == "dapo" || algorithm == "ppo";
}

}  // namespace titan
