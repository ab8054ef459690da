#include "lib/rl/rl_config.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/config/job_config.h"

namespace titan {
namespace {

// A job RlJobConfig accepts: the bundled sorting task and every other key at its default.
JobConfig SortingJob() {
  JobConfig config;
  config.mutable_rl()->set_task("sorting");
  return config;
}

std::string Refusal(const JobConfig& config) {
  return std::string(RlJobConfig(config, RlMode::kTrain).status().message());
}

TEST(RlJobConfigTest, DefaultsAreAccepted) {
  EXPECT_TRUE(RlJobConfig(SortingJob(), RlMode::kTrain).ok()) << Refusal(SortingJob());
}

TEST(RlJobConfigTest, ResponsesMustLeaveRoomForThePrompt) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_max_seq_len(64);
  config.mutable_rl()->set_max_new_tokens(64);
  EXPECT_EQ(Refusal(config),
            "[rl] max_new_tokens = 64 must be below max_seq_len = 64 (prompt + response tokens), "
            "leaving room for the prompt");
  config.mutable_rl()->set_max_new_tokens(63);
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
}

// The refusal names the degree that was set, not all three.
TEST(RlJobConfigTest, ModelParallelDegreesAreRefusedByName) {
  JobConfig config = SortingJob();
  config.mutable_parallelism()->set_context_parallel_degree(2);
  EXPECT_EQ(Refusal(config),
            "[parallelism] context_parallel_degree = 2: titan_rl shards the policy with data "
            "parallelism only (DDP, FSDP, HSDP); set it to 1");
  config = SortingJob();
  config.mutable_parallelism()->set_pipeline_parallel_degree(4);
  EXPECT_EQ(Refusal(config),
            "[parallelism] pipeline_parallel_degree = 4: titan_rl shards the policy with data "
            "parallelism only (DDP, FSDP, HSDP); set it to 1");
}

TEST(RlJobConfigTest, ChatTemplateNeedsThePromptPlaceholder) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_chat_template("User: {question}\nAssistant:");
  EXPECT_EQ(Refusal(config),
            "[rl] chat_template = \"User: {question}\\nAssistant:\": expected a {prompt} "
            "placeholder");
  config.mutable_rl()->set_chat_template("User: {prompt}\nAssistant:");
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
}

TEST(RlJobConfigTest, KeysOfAnotherRewardAreRefused) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_reward_command("cat");
  EXPECT_EQ(Refusal(config),
            "[rl] reward = \"command\" and [rl] reward_command: set both or neither");
  config.mutable_rl()->set_reward("command");
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  config.mutable_rl()->set_reward_command("");
  EXPECT_EQ(Refusal(config),
            "[rl] reward = \"command\" and [rl] reward_command: set both or neither");

  config = SortingJob();
  config.mutable_rl()->set_reward("exact_match");
  config.mutable_rl()->set_reward_timeout_seconds(5);
  EXPECT_EQ(Refusal(config),
            "[rl] reward_timeout_seconds = 5: only reward = \"command\" has a timeout, reward is "
            "\"exact_match\"; remove it");
  config.mutable_rl()->set_reward_timeout_seconds(60);  // the default, spelled out
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  config.mutable_rl()->set_reward("command");
  config.mutable_rl()->set_reward_command("cat");
  config.mutable_rl()->set_reward_timeout_seconds(5);
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);

  config = SortingJob();
  config.mutable_rl()->set_reward_model_path("/models/rm");
  EXPECT_EQ(Refusal(config),
            "[rl] reward = \"reward_model\" and [rl] reward_model_path: set both or neither");
}

TEST(RlJobConfigTest, EvalSizeWithoutATaskSplitIsRefused) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_eval_size(5);
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  config.mutable_rl()->set_eval_prompts_path("held_out.jsonl");
  EXPECT_EQ(Refusal(config),
            "[rl] eval_size = 5: [rl] eval_prompts_path = held_out.jsonl is the held-out set; "
            "eval_size sizes only a bundled task's generated one; remove it");
  config.mutable_rl()->set_eval_size(64);  // the default, spelled out
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);

  config = SortingJob();
  config.mutable_rl()->set_task("");
  config.mutable_rl()->set_prompts_path("prompts.jsonl");
  config.mutable_rl()->set_eval_size(5);
  EXPECT_EQ(Refusal(config),
            "[rl] eval_size = 5: only a bundled [rl] task's generated held-out split has a size, "
            "task is \"\"; remove it");
}

// prompts_path alone: nothing is evaluated, so nothing spaces evaluations or scores their
// responses (SFT's reward scores only held-out ones; grpo, dapo and ppo score their rollouts).
TEST(RlJobConfigTest, EvalKeysWithoutAHeldOutSetAreRefused) {
  const std::string none =
      "and there is none (give [rl] eval_prompts_path, or a bundled task for its split); remove it";
  for (const char* algorithm : {"sft", "grpo", "ppo", "dpo"}) {
    JobConfig config = SortingJob();
    config.mutable_rl()->set_algorithm(algorithm);
    config.mutable_rl()->set_eval_freq(1);
    EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
    config.mutable_rl()->set_task("");
    config.mutable_rl()->set_prompts_path("prompts.jsonl");
    EXPECT_EQ(Refusal(config), "[rl] eval_freq = 1: only a held-out set is evaluated, " + none);
    config.mutable_rl()->set_eval_prompts_path("held_out.jsonl");
    EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
    config.mutable_rl()->set_eval_prompts_path("");
    config.mutable_rl()->set_eval_freq(10);  // the default, spelled out
    EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  }

  JobConfig config = SortingJob();
  config.mutable_rl()->set_algorithm("sft");
  config.mutable_rl()->set_reward("exact_match");
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  config.mutable_rl()->set_task("");
  config.mutable_rl()->set_prompts_path("prompts.jsonl");
  EXPECT_EQ(Refusal(config),
            "[rl] reward = \"exact_match\": sft scores only held-out responses, " + none);
  config.mutable_rl()->set_eval_prompts_path("held_out.jsonl");
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  // GRPO scores its rollouts, held-out set or not.
  config.mutable_rl()->set_eval_prompts_path("");
  config.mutable_rl()->set_algorithm("grpo");
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
}

TEST(RlJobConfigTest, WrittenConfigRunsAgainUnchanged) {
  // config.toml spells every key out, sentinels and trainer defaults included.
  for (const char* name : {"sft", "grpo", "dapo", "ppo", "dpo"}) {
    const std::string file =
        absl::StrCat("configs/rl_", std::string(name) == "dapo" ? "grpo" : name, "_sorting.toml");
    absl::StatusOr<JobConfig> parsed =
        ParseJobConfig(file, {absl::StrCat("--rl.algorithm=", name)});
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    absl::StatusOr<JobConfig> job = RlJobConfig(*parsed, RlMode::kTrain);
    ASSERT_TRUE(job.ok()) << name << ": " << job.status();
    absl::StatusOr<JobConfig> written =
        ParseJobConfigText(JobConfigToToml(*job), "config.toml", {});
    ASSERT_TRUE(written.ok()) << written.status();
    absl::StatusOr<JobConfig> again = RlJobConfig(*written, RlMode::kTrain);
    ASSERT_TRUE(again.ok()) << name << ": " << again.status();
    // The same job but for the file it was read from (config.toml names it in a comment).
    job->mutable_job()->clear_config_file();
    EXPECT_EQ(JobConfigToToml(*again), JobConfigToToml(*job)) << name;
  }
}

TEST(RlJobConfigTest, SpelledOutSentinelsMeanWhatTheyDoLeftOut) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_clip_range(0.3);
  config.mutable_rl()->set_clip_range_high(-1);
  absl::StatusOr<JobConfig> job = RlJobConfig(config, RlMode::kTrain);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->rl().clip_range_high(), 0.3);
  config.mutable_rl()->set_algorithm("dapo");
  job = RlJobConfig(config, RlMode::kTrain);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->rl().clip_range_high(), 0.28);
}

TEST(RlJobConfigTest, TopPZeroIsRefused) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_top_p(0);
  EXPECT_EQ(Refusal(config),
            "[rl] top_p = 0: must be in (0, 1]; a nucleus of probability 0 holds no token");
  config.mutable_rl()->set_top_p(0.01);
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
}

TEST(RlJobConfigTest, BesselStdNeedsTwoSamplesPerGroup) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_advantage_std("bessel");
  config.mutable_rl()->set_group_size(1);
  EXPECT_EQ(Refusal(config),
            "[rl] advantage_std = \"bessel\" divides by group_size - 1: needs group_size >= 2, "
            "not 1");
  config.mutable_rl()->set_advantage_std("population");
  EXPECT_EQ(
      Refusal(config),
      "[rl] group_size = 1: grpo's advantage is a response's reward minus its group's mean, 0 "
      "in a group of one: the run would never learn; use group_size >= 2 (or ppo, whose "
      "advantages come from its value head)");
  EXPECT_TRUE(RlJobConfig(config, RlMode::kGenerate).ok());
  config.mutable_rl()->set_algorithm("ppo");
  config.mutable_rl()->set_dynamic_sampling(false);
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
}

TEST(RlJobConfigTest, ATemperatureThatOverflowsIsRefused) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_temperature(1e-45);
  EXPECT_EQ(Refusal(config),
            "[rl] temperature = 1e-45: below 1e-5 the scaled logits overflow; use 0 for greedy "
            "sampling");
  config.mutable_rl()->set_temperature(1e-5);
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
}

TEST(RlJobConfigTest, StdDivisionNeedsPositiveAdvantageEps) {
  for (const char* std : {"population", "bessel"}) {
    JobConfig config = SortingJob();
    config.mutable_rl()->set_advantage_std(std);
    config.mutable_rl()->set_advantage_eps(0);
    EXPECT_EQ(Refusal(config),
              absl::StrCat("[rl] advantage_eps = 0: must be > 0 with advantage_std = \"", std,
                           "\", which divides by std + advantage_eps (0 for a group of equal "
                           "rewards)"));
    config.mutable_rl()->set_advantage_eps(1e-9);
    EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  }
}

TEST(RlJobConfigTest, DpoBetaMustBePositive) {
  for (const char* loss : {"sigmoid", "ipo"}) {
    JobConfig config = SortingJob();
    config.mutable_rl()->set_algorithm("dpo");
    config.mutable_rl()->set_dpo_loss(loss);
    config.mutable_rl()->set_beta(0);
    EXPECT_EQ(Refusal(config),
              "[rl] beta = 0: must be > 0 (sigmoid: beta·margin at 0 learns nothing; ipo: the "
              "margin target is 1 / (2 beta))");
    config.mutable_rl()->set_beta(0.01);
    EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  }
}

TEST(RlJobConfigTest, SftAndDpoSampleOnlyForGenerate) {
  for (const char* algorithm : {"sft", "dpo"}) {
    JobConfig config = SortingJob();
    config.mutable_rl()->set_algorithm(algorithm);
    config.mutable_rl()->set_temperature(0.7);
    EXPECT_EQ(Refusal(config),
              absl::StrCat("[rl] temperature = 0.7: sft and dpo sample nothing (titan_rl "
                           "--generate does), algorithm is \"",
                           algorithm, "\"; remove it"));
    EXPECT_TRUE(RlJobConfig(config, RlMode::kGenerate).ok());
    config.mutable_rl()->set_temperature(1.0);  // the default, spelled out
    EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  }
}

TEST(RlJobConfigTest, GreedyGroupsAreRefusedForTrainingOnly) {
  for (const char* algorithm : {"grpo", "dapo"}) {
    JobConfig config = SortingJob();
    config.mutable_rl()->set_algorithm(algorithm);
    config.mutable_rl()->set_temperature(0);
    config.mutable_rl()->set_group_size(4);
    EXPECT_EQ(Refusal(config),
              absl::StrCat("[rl] temperature = 0 with [rl] group_size = 4: ", algorithm,
                           " would sample each group's responses greedily, all the same, so "
                           "their rewards are equal and every advantage (r - group mean) is 0: "
                           "the run would never learn. Set temperature > 0 (1.0 samples the "
                           "model's distribution); titan_rl --generate samples greedily"));
    EXPECT_TRUE(RlJobConfig(config, RlMode::kGenerate).ok());
    // Given rollouts are not sampled: the temperature only scales their log-probabilities.
    EXPECT_TRUE(RlJobConfig(config, RlMode::kStepRollouts).ok());
    config.mutable_rl()->set_temperature(0.7);
    EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  }
  // PPO's advantages are its value head's (GAE): a greedy response still has some.
  JobConfig config = SortingJob();
  config.mutable_rl()->set_algorithm("ppo");
  config.mutable_rl()->set_temperature(0);
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
}

TEST(RlJobConfigTest, TopKAndTopPAreRefusedWhenGreedy) {
  const std::string greedy =
      ": only sampling (temperature > 0) keeps the top_k tokens or the top_p nucleus, "
      "temperature is 0 (greedy: the most likely token); remove it";
  for (const char* algorithm : {"ppo", "sft"}) {
    JobConfig config = SortingJob();
    config.mutable_rl()->set_algorithm(algorithm);
    config.mutable_rl()->set_dynamic_sampling(false);
    config.mutable_rl()->set_temperature(0);
    config.mutable_rl()->set_top_k(5);
    const RlMode mode = std::string(algorithm) == "ppo" ? RlMode::kTrain : RlMode::kGenerate;
    EXPECT_EQ(RlJobConfig(config, mode).status().message(), "[rl] top_k = 5" + greedy);
    config.mutable_rl()->set_top_k(0);  // the default, spelled out
    config.mutable_rl()->set_top_p(0.9);
    EXPECT_EQ(RlJobConfig(config, mode).status().message(), "[rl] top_p = 0.9" + greedy);
    config.mutable_rl()->set_top_p(1.0);  // the default, spelled out
    EXPECT_TRUE(RlJobConfig(config, mode).ok()) << RlJobConfig(config, mode).status();
    config.mutable_rl()->set_temperature(0.7);
    config.mutable_rl()->set_top_k(5);
    config.mutable_rl()->set_top_p(0.9);
    EXPECT_TRUE(RlJobConfig(config, mode).ok()) << RlJobConfig(config, mode).status();
  }
}

TEST(RlJobConfigTest, StepRolloutsNeedsASamplingAlgorithm) {
  for (const char* algorithm : {"sft", "dpo"}) {
    JobConfig config = SortingJob();
    config.mutable_rl()->set_algorithm(algorithm);
    EXPECT_EQ(
        RlJobConfig(config, RlMode::kStepRollouts).status().message(),
        absl::StrCat("--step_rollouts updates on scored rollouts: [rl] algorithm must be "
                     "grpo, dapo or ppo, not ",
                     algorithm, " (sft and dpo learn from the examples of [rl] prompts_path)"));
  }
  JobConfig config = SortingJob();
  config.mutable_rl()->set_algorithm("ppo");
  EXPECT_TRUE(RlJobConfig(config, RlMode::kStepRollouts).ok());
}

TEST(RlJobConfigTest, KeysTheAlgorithmDoesNotReadAreRefused) {
  struct Case {
    const char* algorithm;
    std::string override;
    std::string refusal;
  };
  const std::string sampled = "only grpo, dapo and ppo sample rollouts, algorithm is ";
  const std::string grouped = "only grpo and dapo normalise rewards by group, algorithm is ";
  const std::string gae = "only ppo has a value head and GAE, algorithm is \"grpo\"; remove it";
  const std::string dpo = "only dpo has a preference loss, algorithm is \"grpo\"; remove it";
  for (const Case& c : std::vector<Case>{
           {"grpo", "gamma = 0.9", "[rl] gamma = 0.9: " + gae},
           {"grpo", "lam = 0.5", "[rl] lam = 0.5: " + gae},
           {"grpo", "vf_coef = 0.5", "[rl] vf_coef = 0.5: " + gae},
           {"grpo", "value_clip_range = 0.5", "[rl] value_clip_range = 0.5: " + gae},
           {"grpo", "whiten_advantages = false", "[rl] whiten_advantages = false: " + gae},
           {"grpo", "beta = 0.5", "[rl] beta = 0.5: " + dpo},
           {"grpo", "dpo_loss = \"ipo\"", "[rl] dpo_loss = \"ipo\": " + dpo},
           {"grpo", "overlong_penalty_factor = 0.5",
            "[rl] overlong_penalty_factor = 0.5: only an overlong buffer (overlong_buffer_len > 0) "
            "has a penalty; remove it"},
           {"grpo", "kl_coef = 0.0\nkl_estimator = \"k1\"",
            "[rl] kl_estimator = \"k1\": only a KL penalty (grpo, dapo, ppo with kl_coef > 0) "
            "estimates a KL; remove it"},
           {"sft", "group_size = 4", "[rl] group_size = 4: " + sampled + "\"sft\"; remove it"},
           {"sft", "clip_range = 0.3", "[rl] clip_range = 0.3: " + sampled + "\"sft\"; remove it"},
           {"sft", "ppo_epochs = 2", "[rl] ppo_epochs = 2: " + sampled + "\"sft\"; remove it"},
           {"sft", "kl_coef = 0.1",
            "[rl] kl_coef = 0.1: only grpo, dapo and ppo weigh a KL to the reference (dpo: beta), "
            "algorithm is \"sft\"; remove it"},
           {"dpo", "group_size = 4", "[rl] group_size = 4: " + sampled + "\"dpo\"; remove it"},
           {"dpo", "minibatch_size = 4",
            "[rl] minibatch_size = 4: " + sampled + "\"dpo\"; remove it"},
           {"dpo", "reward = \"command\"\nreward_command = \"cat\"",
            "[rl] reward = \"command\": dpo learns from preference pairs and scores no response; "
            "remove it"},
           {"ppo", "advantage_std = \"bessel\"",
            "[rl] advantage_std = \"bessel\": " + grouped + "\"ppo\"; remove it"},
           {"ppo", "dynamic_sampling = true",
            "[rl] dynamic_sampling = true: " + grouped + "\"ppo\"; remove it"},
           {"ppo", "advantage_eps = 0.001",
            "[rl] advantage_eps = 0.001: " + grouped + "\"ppo\"; remove it"},
           {"grpo", "advantage_std = \"none\"\nadvantage_eps = 0.001",
            "[rl] advantage_eps = 0.001: only a std division (advantage_std population or bessel) "
            "adds it, advantage_std is \"none\"; remove it"},
       }) {
    absl::StatusOr<JobConfig> config =
        ParseJobConfigText(absl::StrCat("[rl]\ntask = \"sorting\"\nalgorithm = \"", c.algorithm,
                                        "\"\n", c.override, "\n"),
                           "job.toml", {});
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(Refusal(*config), c.refusal);
  }
}

TEST(RlJobConfigTest, TrainerKeysTitanRlDoesNotReadAreRefused) {
  JobConfig config = SortingJob();
  config.mutable_training()->set_global_batch_size(16);
  EXPECT_EQ(Refusal(config),
            "[training] global_batch_size = 16: titan_rl's batch is [rl] prompts_per_step (times "
            "group_size), run in local_batch_size microbatches; remove it");
  config = SortingJob();
  config.mutable_validation()->set_freq(5);
  EXPECT_EQ(Refusal(config),
            "[validation] freq = 5: titan_rl evaluates [rl] eval_prompts_path (or the task's "
            "held-out split) every [rl] eval_freq steps instead of [validation]; remove it");
  config = SortingJob();
  config.mutable_model()->set_attn_mask_type("block_causal");
  EXPECT_EQ(Refusal(config),
            "[model] attn_mask_type = \"block_causal\": titan_rl's sequences are one prompt + "
            "response each, nothing packed, so there are no documents to mask apart; remove it");
  config.mutable_model()->set_attn_mask_type("causal");
  EXPECT_TRUE(RlJobConfig(config, RlMode::kTrain).ok()) << Refusal(config);
  // titan_rl checks these first, before ValidateJobConfig asks c4 for a dataset_path.
  config = SortingJob();
  config.mutable_training()->set_dataset("c4");
  EXPECT_EQ(RefuseTrainerDataKeys(config).message(),
            "[training] dataset: titan_rl reads [rl] prompts_path (or generates [rl] task), not "
            "[training] dataset/dataset_path/dataset_text_field; remove them");
  EXPECT_EQ(Refusal(config), RefuseTrainerDataKeys(config).message());
  EXPECT_TRUE(RefuseTrainerDataKeys(SortingJob()).ok());
}

}  // namespace
}  // namespace titan
