#include "lib/rl/rewards.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "lib/rl/examples.h"

namespace titan {
namespace {

TEST(VerifierTest, Gsm8kHashAnswer) {
  EXPECT_EQ(HashAnswer("so 3 + 4 = 7\n#### 7"), "7");
  EXPECT_EQ(HashAnswer("#### 1,234 \nthanks"), "1,234");
  EXPECT_EQ(HashAnswer("#### 1 #### 2"), "2");  // the last one
  EXPECT_EQ(HashAnswer("no answer"), std::nullopt);
  EXPECT_EQ(HashAnswer("#### "), std::nullopt);
  // Anywhere in the response: an answer line followed by more text still counts (only numeric,
  // verl's rule, reads the last 300 characters).
  const std::string rambling = " #### a c e\n" + std::string(400, 'x');
  EXPECT_EQ(HashAnswer(rambling), "a c e");
  EXPECT_EQ(ExactMatchReward(rambling, "a c e"), 1);
  EXPECT_EQ(FormatReward(rambling), 1);
  EXPECT_EQ(NumericReward(" #### 68\n" + std::string(400, 'x'), "68"), 0);
  EXPECT_EQ(NumericReward(" #### 68", "68"), 1);
  EXPECT_EQ(NumericReward(" #### 69", "68"), 0);
  EXPECT_EQ(NumericReward("68", "68"), 0);  // no #### format
  EXPECT_EQ(ExactMatchReward(" #### a c e", "a c e"), 1);
  EXPECT_EQ(ExactMatchReward(" a c e ", "a c e"), 1);
  EXPECT_EQ(ExactMatchReward(" #### a e c", "a c e"), 0);
  EXPECT_EQ(FormatReward(" #### x"), 1);
  EXPECT_EQ(FormatReward(" x"), 0);
}

// verl's gsm8k.py, strict: re.findall("#### (\-?[0-9\.\,]+)", solution_str[-300:]), the last
// match with "," and "$" removed, compared with the ground truth as a string.
TEST(VerifierTest, NumericIsVerlsStrictGsm8kRule) {
  EXPECT_EQ(Gsm8kAnswer("so #### 1,000 dollars"), "1000");
  EXPECT_EQ(Gsm8kAnswer("#### -5."), "-5.");
  EXPECT_EQ(Gsm8kAnswer("#### 1 then #### x"), "1");  // the last match, not the last ####
  EXPECT_EQ(Gsm8kAnswer("##### 7"), "7");
  EXPECT_EQ(Gsm8kAnswer("#### 7" + std::string(296, ' ')), std::nullopt);
  EXPECT_EQ(Gsm8kAnswer("#### 7" + std::string(294, ' ')), "7");
  // Characters, not bytes, as Python's str[-300:]: 294 "é" are 588 bytes and the answer still
  // counts; a 295th pushes it out.
  std::string accents;
  for (int i = 0; i < 294; ++i) accents += "\xC3\xA9";
  EXPECT_EQ(Gsm8kAnswer("#### 7" + accents), "7");
  EXPECT_EQ(Gsm8kAnswer("#### 7" + accents + "\xC3\xA9"), std::nullopt);
  for (const char* unmatched : {"####72", "#### inf", "#### nan", "#### +72", "#### - 72",
                                "####\t72", "#### $72", "#### ", "no answer"}) {
    EXPECT_EQ(Gsm8kAnswer(unmatched), std::nullopt) << unmatched;
  }
  EXPECT_EQ(NumericReward("#### 72", "72"), 1);
  EXPECT_EQ(NumericReward("#### 72 dollars", "72"), 1);
  EXPECT_EQ(NumericReward("#### 72\n", " 72 "), 1);
  EXPECT_EQ(NumericReward("#### 7,2", "72"), 1);
  EXPECT_EQ(NumericReward("#### 1,000", "1,000"), 1);  // the reference's commas go too
  EXPECT_EQ(NumericReward("#### -3", "-3"), 1);
  // What strtod read as 72 and verl does not: hex, exponents, decimals, no space, a sign.
  for (const char* hack :
       {"#### 0x48", "#### 7.2e1", "#### 72.0", "####72", "#### +72", "#### 072", "#### 72."}) {
    EXPECT_EQ(NumericReward(hack, "72"), 0) << hack;
  }
  EXPECT_EQ(NumericReward("#### inf", "inf"), 0);
  EXPECT_EQ(NumericReward("#### nan", "nan"), 0);
}

TEST(VerifierTest, ExactMatchNormalisesBothSidesAlike) {
  EXPECT_EQ(ExactMatchReward(" #### 1,000", "1,000"), 1);
  EXPECT_EQ(ExactMatchReward(" #### red, green", "red, green"), 1);
  EXPECT_EQ(ExactMatchReward(" #### red, green\n", " red, green "), 1);
  EXPECT_EQ(ExactMatchReward(" #### 1000", "1,000"), 0);
  EXPECT_EQ(ExactMatchReward(" #### 1,000", "1000"), 0);
  EXPECT_EQ(ExactMatchReward(" #### red green", "red, green"), 0);
}

TEST(CommandScorerTest, ReadsOneRewardPerLine) {
  const std::vector<ScoredRollout> rollouts = {{"p1", "r1", "a"}, {"p2", "r22", "b"}};
  // Each reward is the length of the rollout's JSON line: the command really read stdin.
  auto rewards = ScoreWithCommand("while IFS= read -r l; do echo ${#l}; done", rollouts,
                                  absl::Seconds(10));
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  ASSERT_EQ(rewards->size(), 2u);
  EXPECT_EQ((*rewards)[0], std::string(R"({"answer":"a","prompt":"p1","response":"r1"})").size());
  EXPECT_EQ((*rewards)[1], (*rewards)[0] + 1);
}

TEST(VerifierTest, KindPicksTheVerifier) {
  EXPECT_EQ(VerifierReward("exact_match", " #### a b c", "a b c"), 1);
  EXPECT_EQ(VerifierReward("exact_match", " #### a c b", "a b c"), 0);
  EXPECT_EQ(VerifierReward("numeric", "so #### 1,000", "1000"), 1);
  EXPECT_EQ(VerifierReward("format", " #### wrong", "a b c"), 1);
  EXPECT_EQ(VerifierReward("format", "no answer", "a b c"), 0);
}

TEST(VerifierTest, OnlyComparingRewardsNeedAnAnswer) {
  EXPECT_TRUE(RewardNeedsAnswer("numeric"));
  EXPECT_TRUE(RewardNeedsAnswer("exact_match"));
  EXPECT_FALSE(RewardNeedsAnswer("format"));
  EXPECT_FALSE(RewardNeedsAnswer("command"));
  EXPECT_FALSE(RewardNeedsAnswer("reward_model"));
}

TEST(CommandScorerTest, FailuresAreClearErrors) {
  const std::vector<ScoredRollout> rollouts = {{"p", "r", "a"}};
  auto failed = ScoreWithCommand("echo broken >&2; exit 3", rollouts, absl::Seconds(10));
  EXPECT_FALSE(failed.ok());
  EXPECT_TRUE(absl::StrContains(failed.status().message(), "exit status 3"));
  EXPECT_TRUE(absl::StrContains(failed.status().message(), "broken"));
  auto slow = ScoreWithCommand("sleep 30", rollouts, absl::Milliseconds(300));
  EXPECT_TRUE(absl::IsDeadlineExceeded(slow.status())) << slow.status();
  auto extra_output =
      ScoreWithCommand("cat >/dev/null; echo 1; echo 2", rollouts, absl::Seconds(10));
  EXPECT_EQ(extra_output.status().message(),
            "[rl] reward_command \"cat >/dev/null; echo 1; echo 2\" printed more than 1 lines for "
            "1 rollouts (killed at line 2), expected one finite decimal number per rollout");
  const std::vector<ScoredRollout> two(2, {"p", "r", "a"});
  auto short_output = ScoreWithCommand("cat >/dev/null; echo 1", two, absl::Seconds(10));
  EXPECT_TRUE(absl::StrContains(short_output.status().message(), "1 rewards for 2 rollouts"))
      << short_output.status();
  for (const char* printed :
       {"yes", "nan", "inf", "-Infinity", "1e999", "0x10", "1.5e", ".", "1 2", "+-1"}) {
    auto refused = ScoreWithCommand(absl::StrCat("cat >/dev/null; echo '", printed, "'"), rollouts,
                                    absl::Seconds(10));
    EXPECT_EQ(
        refused.status().message(),
        absl::StrCat("[rl] reward_command \"cat >/dev/null; echo '", printed, "'\" printed \"",
                     printed, "\" on line 1, expected one finite decimal number per line"))
        << printed;
  }
}

// A long line is quoted shortened; one past 1 MiB is refused once past it, not read to its end.
TEST(CommandScorerTest, LongLinesAreQuotedShortAndBounded) {
  const std::vector<ScoredRollout> rollouts(2, {"p", "r", "a"});
  const std::string big = "cat >/dev/null; echo 1; head -c 1000000 /dev/zero | tr '\\0' x; echo";
  EXPECT_EQ(
      ScoreWithCommand(big, rollouts, absl::Seconds(30)).status().message(),
      absl::StrCat("[rl] reward_command \"", big, "\" printed \"", std::string(30, 'x'), "...",
                   std::string(30, 'x'),
                   "\" (1000000 bytes) on line 2, expected one finite decimal number per line"));
  const std::string endless =
      "cat >/dev/null; echo 1; head -c 3000000 /dev/zero | tr '\\0' x; sleep 60";
  const absl::Time start = absl::Now();
  EXPECT_EQ(ScoreWithCommand(endless, rollouts, absl::Seconds(20)).status().message(),
            absl::StrCat("[rl] reward_command \"", endless,
                         "\" printed over 1048576 bytes on line 2 (killed), expected one finite "
                         "decimal number per line"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

// A scorer printing short lines without end is refused at the first line past the rollouts'
// count and killed: it grew this process's memory until the timeout. A bad line among those read
// is named first, as before.
TEST(CommandScorerTest, EndlessShortLinesAreRefusedAtTheFirstExtraLine) {
  const std::vector<ScoredRollout> rollouts(3, {"p", "r", "a"});
  const std::string endless = "cat >/dev/null; while :; do echo 1; done";
  const absl::Time start = absl::Now();
  EXPECT_EQ(ScoreWithCommand(endless, rollouts, absl::Seconds(60)).status().message(),
            absl::StrCat("[rl] reward_command \"", endless,
                         "\" printed more than 3 lines for 3 rollouts (killed at line 4), expected "
                         "one finite decimal number per rollout"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  const std::string bad = "cat >/dev/null; echo 1; while :; do echo x; done";
  EXPECT_EQ(
      ScoreWithCommand(bad, rollouts, absl::Seconds(60)).status().message(),
      absl::StrCat("[rl] reward_command \"", bad,
                   "\" printed \"x\" on line 2, expected one finite decimal number per line"));
}

// The pid a command wrote to `path`, once written (0: not within 10 s).
pid_t WaitForPid(const std::string& path) {
  for (int i = 0; i < 1000; ++i) {
    std::ifstream in(path);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return 0;
}

// Whether `pid` still runs within 5 s: gone or a zombie (its reaper may be slow) is not running.
bool StillRunning(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string id, name, state;
    if (!(stat >> id >> name >> state) || state == "Z") return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name, "_", ::getpid());
}

TEST(CommandScorerTest, StopSignalKillsTheCommandsGroupAtOnce) {
  const std::string pid_file = TempPath("stopped_scorer_pid");
  const std::vector<ScoredRollout> rollouts = {{"p", "r", "a"}};
  const absl::Time start = absl::Now();
  // A child of the shell, which only the process group reaches.
  auto stopped = ScoreWithCommand(
      absl::StrCat("cat >/dev/null; sh -c 'echo $$ >", pid_file, "; exec sleep 100'; echo 1"),
      rollouts, absl::Seconds(60),
      [&] { return absl::Now() - start > absl::Milliseconds(500) ? SIGTERM : 0; });
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(absl::IsCancelled(stopped.status())) << stopped.status();
  EXPECT_TRUE(absl::StrContains(stopped.status().message(), "received signal 15"))
      << stopped.status();
  const pid_t scorer = WaitForPid(pid_file);
  ASSERT_GT(scorer, 0);
  EXPECT_FALSE(StillRunning(scorer));
}

TEST(CommandScorerTest, CommandSeesNoOtherFileOfOurs) {
  const std::string path = TempPath("inherited");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);  // no O_CLOEXEC
  ASSERT_GE(fd, 3);
  auto rewards = ScoreWithCommand(
      absl::StrCat("cat >/dev/null; [ -e /proc/$$/fd/", fd, " ] && echo 1 || echo 0"),
      {{"p", "r", "a"}}, absl::Seconds(10));
  ::close(fd);
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_EQ(*rewards, std::vector<double>{0});
}

TEST(CommandScorerTest, CommandDiesWithItsParent) {
  const std::string pid_file = TempPath("orphaned_scorer_pid");
  const pid_t parent = ::fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    // The shell's child, as dash runs "sh -c script.sh".
    (void)ScoreWithCommand(
        absl::StrCat("cat >/dev/null; sh -c 'echo $$ >", pid_file, "; exec sleep 100'; echo 1"),
        {{"p", "r", "a"}}, absl::Seconds(60));
    ::_exit(0);
  }
  const pid_t scorer = WaitForPid(pid_file);
  ::kill(parent, SIGKILL);
  ::waitpid(parent, nullptr, 0);
  ASSERT_GT(scorer, 0);
  EXPECT_FALSE(StillRunning(scorer));
}

TEST(ScoreWithCommandTest, ErrorsShowNoUrlCredentials) {
  const std::vector<ScoredRollout> rollouts = {{"p", "r", "a"}};
  auto failed = ScoreWithCommand(
      "cat >/dev/null; echo fetching http://alice:S3cretPass@127.0.0.1:9/score >&2; exit 3",
      rollouts, absl::Seconds(10));
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(std::string(failed.status().message()).find("S3cretPass"), std::string::npos)
      << failed.status();
  EXPECT_NE(failed.status().message().find("http://***@127.0.0.1:9/score"), absl::string_view::npos)
      << failed.status();
}

// A scorer's stderr and the command itself are relayed with every secret they show masked: a
// secret-named value, or the value of a secret-named environment variable the scorer printed.
TEST(ScoreWithCommandTest, ErrorsShowNoSecrets) {
  ASSERT_EQ(setenv("TITAN_TEST_HF_TOKEN", "hf_0123456789abcdef", 1), 0);
  const std::vector<ScoredRollout> rollouts = {{"p", "r", "a"}};
  auto failed = ScoreWithCommand(
      "API_KEY=sk-command-secret sh -c 'cat >/dev/null; echo Authorization failed for "
      "api_key=sk-abc123def456 >&2; echo token was $TITAN_TEST_HF_TOKEN >&2; exit 1'",
      rollouts, absl::Seconds(10));
  unsetenv("TITAN_TEST_HF_TOKEN");
  ASSERT_FALSE(failed.ok());
  const std::string message(failed.status().message());
  for (const char* secret : {"sk-command-secret", "sk-abc123def456", "hf_0123456789abcdef"}) {
    EXPECT_FALSE(absl::StrContains(message, secret)) << message;
  }
  EXPECT_TRUE(absl::StrContains(message, "\"API_KEY=*** sh -c")) << message;
  EXPECT_TRUE(absl::StrContains(message, "failed (exit status 1)")) << message;
  EXPECT_TRUE(absl::StrContains(message, "Authorization failed for api_key=***\ntoken was ***"))
      << message;
}

TEST(ScoreWithCommandTest, ReadsDecimalRewardsAndRefusesBlankLines) {
  const std::vector<ScoredRollout> rollouts(5, {"p", "r", "a"});
  auto rewards = ScoreWithCommand("cat >/dev/null; printf '1\\n-0.5\\n 1e-3 \\n+2.\\n.25E+1\\n'",
                                  rollouts, absl::Seconds(10));
  ASSERT_TRUE(rewards.ok()) << rewards.status();
  EXPECT_EQ(*rewards, (std::vector<double>{1, -0.5, 1e-3, 2, 2.5}));
  // 5 numbers for 5 rollouts: skipped, a blank line printed for one rollout shifts the rest.
  auto blank = ScoreWithCommand("cat >/dev/null; printf '1\\n\\n2\\n3\\n4\\n5\\n'", rollouts,
                                absl::Seconds(10));
  EXPECT_TRUE(absl::StrContains(blank.status().message(),
                                "printed \"\" on line 2, expected one finite decimal number"))
      << blank.status();
}

TEST(CheckFiniteRewardsTest, NamesTheFirstNonFiniteReward) {
  EXPECT_TRUE(CheckFiniteRewards({0, -1.5, 3.4e38, -3.4e38}, "scorer").ok());
  const absl::Status nan = CheckFiniteRewards({1, std::nan(""), INFINITY}, "scorer");
  EXPECT_EQ(nan.message(), "scorer: reward 2 of 3 is nan, expected a finite number");
  EXPECT_EQ(CheckFiniteRewards({-INFINITY}, "scorer").message(),
            "scorer: reward 1 of 1 is -inf, expected a finite number");
}

// Finite in double, infinite once the update casts it to float32: "the update diverged".
TEST(CheckFiniteRewardsTest, RefusesRewardsBeyondFloat32) {
  EXPECT_TRUE(FitsFloat32(std::numeric_limits<float>::max()));
  EXPECT_FALSE(FitsFloat32(1e39));
  EXPECT_FALSE(FitsFloat32(-1e39));
  EXPECT_EQ(CheckFiniteRewards({1, 1e39}, "scorer").message(),
            "scorer: reward 2 of 2 is 1e+39, beyond float32's range (magnitude at most 3.4e38), "
            "where the update computes: it would be infinite there");
  EXPECT_EQ(CheckFiniteRewards({-1e300}, "scorer").message(),
            "scorer: reward 1 of 1 is -1e+300, beyond float32's range (magnitude at most 3.4e38), "
            "where the update computes: it would be infinite there");
  const std::vector<ScoredRollout> rollouts(2, {"p", "r", "a"});
  auto refused =
      ScoreWithCommand("cat >/dev/null; printf '1\\n-1e39\\n'", rollouts, absl::Seconds(10));
  EXPECT_EQ(refused.status().message(),
            "[rl] reward_command \"cat >/dev/null; printf '1\\n-1e39\\n'\" printed \"-1e39\" on "
            "line 2, beyond float32's range (magnitude at most 3.4e38), where the update computes: "
            "it would be infinite there");
}

TEST(TaskTest, HeldOutSplitIsDisjointAndAnswersVerify) {
  for (const char* task : {"arithmetic", "sorting"}) {
    auto train = MakeTaskExamples(task, 200, 1, false);
    auto held = MakeTaskExamples(task, 50, 2, true);
    ASSERT_TRUE(train.ok() && held.ok());
    std::set<std::string> train_prompts;
    for (const RlExample& e : *train) train_prompts.insert(e.prompt);
    for (const RlExample& e : *held) {
      EXPECT_EQ(train_prompts.count(e.prompt), 0u) << e.prompt;
      EXPECT_EQ(ExactMatchReward(e.response, e.answer), 1) << e.response;
      EXPECT_EQ(ExactMatchReward(e.rejected, e.answer), 0) << e.rejected;
    }
  }
  EXPECT_EQ(NumericReward((*MakeTaskExamples("arithmetic", 1, 3, false))[0].response,
                          (*MakeTaskExamples("arithmetic", 1, 3, false))[0].answer),
            1);
}

}  // namespace
}  // namespace titan
