#include "lib/rl/rl_config.h"

#include <string>

#include "gtest/gtest.h"

namespace titan {
namespace {

// A job RlJobConfig accepts: the bundled sorting task and every other key at its default.
JobConfig SortingJob() {
  JobConfig config;
  config.mutable_rl()->set_task("sorting");
  return config;
}

std::string Refusal(const JobConfig& config) {
  return std::string(RlJobConfig(config).status().message());
}

TEST(RlJobConfigTest, DefaultsAreAccepted) {
  EXPECT_TRUE(RlJobConfig(SortingJob()).ok()) << Refusal(SortingJob());
}

TEST(RlJobConfigTest, ResponsesMustLeaveRoomForThePrompt) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_max_seq_len(64);
  config.mutable_rl()->set_max_new_tokens(64);
  EXPECT_EQ(Refusal(config),
            "[rl] max_new_tokens = 64 must be below max_seq_len = 64 (prompt + response tokens), "
            "leaving room for the prompt");
  config.mutable_rl()->set_max_new_tokens(63);
  EXPECT_TRUE(RlJobConfig(config).ok()) << Refusal(config);
}

TEST(RlJobConfigTest, ChatTemplateNeedsThePromptPlaceholder) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_chat_template("User: {question}\nAssistant:");
  EXPECT_EQ(Refusal(config),
            "[rl] chat_template = \"User: {question}\\nAssistant:\": expected a {prompt} "
            "placeholder");
  config.mutable_rl()->set_chat_template("User: {prompt}\nAssistant:");
  EXPECT_TRUE(RlJobConfig(config).ok()) << Refusal(config);
}

TEST(RlJobConfigTest, KeysOfAnotherRewardAreRefused) {
  JobConfig config = SortingJob();
  config.mutable_rl()->set_reward_command("cat");
  EXPECT_EQ(Refusal(config),
            "[rl] reward = \"command\" and [rl] reward_command: set both or neither");
  config.mutable_rl()->set_reward("command");
  EXPECT_TRUE(RlJobConfig(config).ok()) << Refusal(config);
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
  EXPECT_TRUE(RlJobConfig(config).ok()) << Refusal(config);
  config.mutable_rl()->set_reward("command");
  config.mutable_rl()->set_reward_command("cat");
  config.mutable_rl()->set_reward_timeout_seconds(5);
  EXPECT_TRUE(RlJobConfig(config).ok()) << Refusal(config);

  config = SortingJob();
  config.mutable_rl()->set_reward_model_path("/models/rm");
  EXPECT_EQ(Refusal(config),
            "[rl] reward = \"reward_model\" and [rl] reward_model_path: set both or neither");
}

}  // namespace
}  // namespace titan
