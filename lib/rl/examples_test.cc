#include "lib/rl/examples.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/rl/rewards.h"
#include "lib/util/file_util.h"
#include "lib/util/gzip_file.h"

namespace titan {
namespace {

// `text` written to a file named `name` in the test's temporary folder; returns its path.
std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  EXPECT_TRUE(WriteFileAtomically(path, text).ok());
  return path;
}

TEST(ExamplesTest, RequireAnswersNamesTheLineWithoutOne) {
  const std::string path = WriteTemp("prompts.jsonl",
                                     "{\"prompt\":\"What is 1 + 2?\",\"answer\":3}\n"
                                     "{\"prompt\":\"Sort: b a\"}\n");
  auto examples = ReadExamples(path, "grpo");
  ASSERT_TRUE(examples.ok()) << examples.status();
  EXPECT_EQ(RequireAnswers(*examples, "the verifier needs it").message(),
            path + ":2: no \"answer\" field; the verifier needs it");
  examples->pop_back();
  EXPECT_TRUE(RequireAnswers(*examples, "").ok());
  auto task = MakeTaskExamples("sorting", 4, 1, false);
  ASSERT_TRUE(task.ok());
  EXPECT_TRUE(RequireAnswers(*task, "").ok());
}

TEST(ExamplesTest, GzipPromptsFilesReadAsTheirText) {
  const std::string text = "{\"prompt\":\"Sort: b a\",\"answer\":\"a b\"}\n{\"prompt\":\"x\"}\n";
  const std::string path = testing::TempDir() + "/prompts.jsonl.gz";
  ASSERT_TRUE(GzipFile(WriteTemp("prompts_to_pack.jsonl", text), path).ok());
  auto examples = ReadExamples(path, "grpo");
  ASSERT_TRUE(examples.ok()) << examples.status();
  ASSERT_EQ(examples->size(), 2u);
  EXPECT_EQ((*examples)[0].prompt, "Sort: b a");
  EXPECT_EQ((*examples)[0].answer, "a b");
  EXPECT_EQ((*examples)[1].where, path + ":2");
}

TEST(ExamplesTest, HeldOutTaskPromptsAreDistinctAndDisjointFromTraining) {
  for (const auto& [task, distinct] : {std::pair{"sorting", 84}, std::pair{"arithmetic", 358}}) {
    auto train = MakeTaskExamples(task, 4096, 7, false);
    ASSERT_TRUE(train.ok()) << train.status();
    std::set<std::string> train_prompts;
    for (const RlExample& e : *train) train_prompts.insert(e.prompt);
    for (const int count : {64, distinct}) {
      auto held_out = MakeTaskExamples(task, count, 8, true);
      ASSERT_TRUE(held_out.ok()) << held_out.status();
      std::set<std::string> prompts;
      for (const RlExample& e : *held_out) {
        prompts.insert(e.prompt);
        EXPECT_EQ(train_prompts.count(e.prompt), 0) << e.prompt;
      }
      EXPECT_EQ(prompts.size(), count) << task;
    }
    EXPECT_EQ(MakeTaskExamples(task, distinct + 1, 8, true).status().message(),
              absl::StrCat(distinct + 1, " held-out examples asked for, but the ", task,
                           " task has ", distinct, " distinct held-out prompts"));
  }
}

TEST(ExamplesTest, NumericAnswersReadAsTheirDecimalText) {
  const std::string path = WriteTemp("numeric.jsonl",
                                     "{\"prompt\":\"a\",\"answer\":72}\n"
                                     "{\"prompt\":\"b\",\"answer\":72.0}\n"
                                     "{\"prompt\":\"c\",\"answer\":-0.5}\n"
                                     "{\"prompt\":\"d\",\"answer\":\"1,000\"}\n"
                                     "{\"prompt\":\"e\",\"answer\":1.5e-7}\n");
  auto examples = ReadExamples(path, "grpo");
  ASSERT_TRUE(examples.ok()) << examples.status();
  ASSERT_EQ(examples->size(), 5u);
  EXPECT_EQ((*examples)[0].answer, "72");
  EXPECT_EQ((*examples)[1].answer, "72");
  EXPECT_EQ((*examples)[2].answer, "-0.5");
  EXPECT_EQ((*examples)[3].answer, "1,000");
  EXPECT_EQ((*examples)[4].answer, "0.00000015");  // no exponent, which the verifier cannot match
}

// Integers past 64 bits (and floats with more digits than a double keeps) keep every digit:
// nlohmann holds them as doubles, whose 17 digits made a 30-digit answer another number, and a
// response giving the right one scored 0.
TEST(ExamplesTest, NumericAnswersKeepDigitsBeyondADouble) {
  const std::string path =
      WriteTemp("big.jsonl",
                "{\"prompt\":\"a\",\"answer\":123456789012345678901234567890}\n"
                "{\"prompt\":\"b\",\"answer\":-98765432109876543210.5}\n"
                "{\"prompt\":\"c\",\"answer\":1.2345678901234567890123e25}\n"
                // A repeated key: the last value, as nlohmann keeps it.
                "{\"prompt\":\"d\",\"answer\":1.5e30,\"answer\":5}\n");
  auto examples = ReadExamples(path, "grpo");
  ASSERT_TRUE(examples.ok()) << examples.status();
  ASSERT_EQ(examples->size(), 4u);
  EXPECT_EQ((*examples)[0].answer, "123456789012345678901234567890");
  EXPECT_EQ((*examples)[1].answer, "-98765432109876543210.5");
  EXPECT_EQ((*examples)[2].answer, "12345678901234567890123000");
  EXPECT_EQ((*examples)[3].answer, "5");
  const std::string& answer = (*examples)[0].answer;
  EXPECT_EQ(NumericReward("so #### 123456789012345678901234567890", answer), 1);
  EXPECT_EQ(NumericReward("so #### 123,456,789,012,345,678,901,234,567,890", answer), 1);
  EXPECT_EQ(ExactMatchReward("#### 123456789012345678901234567890", answer), 1);
  // The double's value is another number.
  EXPECT_EQ(NumericReward("so #### 123456789012345677877719597056", answer), 0);
  EXPECT_EQ(NumericReward("so #### -98765432109876543210.5", (*examples)[1].answer), 1);
}

// An exponent spelling more than kMaxDecimalExponentZeros zeros is refused, naming the line.
TEST(ExamplesTest, NumericAnswerWithAHugeExponentIsRefused) {
  const std::string path = WriteTemp("tiny.jsonl", "{\"prompt\":\"a\",\"answer\":1e-99999999}\n");
  EXPECT_EQ(ReadExamples(path, "grpo").status().message(),
            path +
                ":1: \"answer\" 1e-99999999: spelled without its exponent it takes over 1000 "
                "zeros; write it as a string");
}

// Past a double's range nlohmann reads no number: the refusal says how to give it.
TEST(ExamplesTest, NumericAnswerPastADoublesRangeIsRefusedWithTheWayOut) {
  const std::string path = WriteTemp("huge.jsonl", "{\"prompt\":\"a\",\"answer\":1e309}\n");
  const std::string message(ReadExamples(path, "grpo").status().message());
  EXPECT_TRUE(absl::StartsWith(message, path + ":1: ")) << message;
  EXPECT_TRUE(absl::StrContains(message, "number overflow parsing '1e309'")) << message;
  EXPECT_TRUE(absl::EndsWith(message, "; write such a number as a string")) << message;
}

// -0 and -0.0 both read "0" (nlohmann keeps no sign on the integer zero).
TEST(ExamplesTest, NegativeZeroAnswersReadAsZero) {
  const std::string path = WriteTemp(
      "zeros.jsonl", "{\"prompt\":\"a\",\"answer\":-0}\n{\"prompt\":\"b\",\"answer\":-0.0}\n");
  absl::StatusOr<std::vector<RlExample>> examples = ReadExamples(path, "grpo");
  ASSERT_TRUE(examples.ok()) << examples.status();
  EXPECT_EQ((*examples)[0].answer, "0");
  EXPECT_EQ((*examples)[1].answer, "0");
}

TEST(ExamplesTest, NumbersAreRefusedAsPromptsAndResponses) {
  const struct {
    std::string line;
    std::string algorithm;
    std::string error;
  } cases[] = {
      {R"({"prompt":5})", "", ":1: \"prompt\" must be a string, got number"},
      {R"({"prompt":"a","response":7})", "sft", ":1: \"response\" must be a string, got number"},
      {R"({"prompt":"a","chosen":1,"rejected":"b"})", "dpo",
       ":1: \"chosen\" must be a string, got number"},
      {R"({"prompt":"a","chosen":"b","rejected":2.5})", "dpo",
       ":1: \"rejected\" must be a string, got number"},
      {R"({"prompt":"a","answer":true})", "grpo", ":1: \"answer\" must be a string, got boolean"},
  };
  for (const auto& c : cases) {
    const std::string path = WriteTemp("number.jsonl", c.line + "\n");
    EXPECT_EQ(std::string(ReadExamples(path, c.algorithm).status().message()), path + c.error)
        << c.line;
  }
}

TEST(RewardedRolloutsTest, ReadsPromptResponseAndReward) {
  const std::string path =
      WriteTemp("good.jsonl",
                "{\"prompt\":\"Sort: b a\",\"response\":\"#### a b\",\"reward\":1}\n\n"
                "{\"prompt\":\"Sort: c a\",\"response\":\"#### c a\",\"reward\":-0.5}\n");
  auto rollouts = ReadRewardedRollouts(path, "grpo");
  ASSERT_TRUE(rollouts.ok()) << rollouts.status();
  ASSERT_EQ(rollouts->size(), 2u);
  EXPECT_EQ((*rollouts)[1].prompt, "Sort: c a");
  EXPECT_EQ((*rollouts)[1].response, "#### c a");
  EXPECT_EQ((*rollouts)[1].reward, -0.5);
}

TEST(RewardedRolloutsTest, ReadsLogprobsOfEveryRowOrNone) {
  const std::string with = R"({"prompt":"a","response":"b","reward":1,"logprobs":[-0.5,-2]})";
  const std::string without = R"({"prompt":"a","response":"b","reward":1})";
  std::string path = WriteTemp("logprobs.jsonl", with + "\n" + with + "\n");
  auto rollouts = ReadRewardedRollouts(path, "grpo");
  ASSERT_TRUE(rollouts.ok()) << rollouts.status();
  EXPECT_TRUE((*rollouts)[1].has_logprobs);
  EXPECT_EQ((*rollouts)[1].logprobs, (std::vector<double>{-0.5, -2}));
  const struct {
    std::string lines;
    std::string error;
  } cases[] = {
      {with + "\n" + without,
       ":2: no \"logprobs\" field, which PATH:1 has: give every rollout's "
       "log-probabilities or none"},
      {without + "\n" + with,
       ":1: no \"logprobs\" field, which PATH:2 has: give every rollout's "
       "log-probabilities or none"},
      {R"({"prompt":"a","response":"b","reward":1,"logprobs":-1})",
       ":1: \"logprobs\" must be an array of numbers, got number"},
      {R"({"prompt":"a","response":"b","reward":1,"logprobs":[-1,null]})",
       ":1: \"logprobs\"[1] is null, not a number in float32's range"},
      {R"({"prompt":"a","response":"b","reward":1,"logprobs":[-1e39]})",
       ":1: \"logprobs\"[0] is -1e+39, not a number in float32's range"},
      {R"({"prompt":"a","response":"b","reward":1,"logprobs":[0,-1,0.25]})",
       ":1: \"logprobs\"[2] is 0.25, not a log-probability (at most 0)"},
  };
  for (const auto& c : cases) {
    path = WriteTemp("bad_logprobs.jsonl", c.lines + "\n");
    std::string error = c.error;
    if (const size_t at = error.find("PATH"); at != std::string::npos) error.replace(at, 4, path);
    EXPECT_EQ(std::string(ReadRewardedRollouts(path, "grpo").status().message()), path + error)
        << c.lines;
  }
}

TEST(RewardedRolloutsTest, ZeroIsALogProbability) {
  const std::string path =
      WriteTemp("certain.jsonl", R"({"prompt":"a","response":"b","reward":1,"logprobs":[0,-0.0]})"
                                 "\n");
  auto rollouts = ReadRewardedRollouts(path, "grpo");
  ASSERT_TRUE(rollouts.ok()) << rollouts.status();
  EXPECT_EQ((*rollouts)[0].logprobs, (std::vector<double>{0, 0}));
}

// Rows with the given prompts, read from a file so that each has its path:line.
std::vector<RewardedRollout> RowsOf(const std::string& name,
                                    const std::vector<std::string>& prompts) {
  std::string text;
  for (const std::string& prompt : prompts) {
    absl::StrAppend(&text, R"({"prompt":")", prompt, R"(","response":"r","reward":1})", "\n");
  }
  auto rollouts = ReadRewardedRollouts(WriteTemp(name, text), "grpo");
  EXPECT_TRUE(rollouts.ok()) << rollouts.status();
  return rollouts.ok() ? *rollouts : std::vector<RewardedRollout>();
}

TEST(RewardedRolloutsTest, GroupsOfOnePromptEachPass) {
  // One prompt may have several groups; groups need not be sorted.
  EXPECT_TRUE(CheckRolloutGroups(RowsOf("grouped.jsonl", {"b", "b", "a", "a", "b", "b"}), 2).ok());
  EXPECT_TRUE(CheckRolloutGroups(RowsOf("ones.jsonl", {"b", "a", "c"}), 1).ok());
}

TEST(RewardedRolloutsTest, AGroupOfMixedPromptsNamesTheRowAndBothPrompts) {
  const std::string path = testing::TempDir() + "/mixed.jsonl";
  const absl::Status status = CheckRolloutGroups(
      RowsOf("mixed.jsonl",
             {"Sort: b a", "Sort: b a", "Sort: b a", "Sort: c a", "Sort: c a", "Sort: b a"}),
      3);
  EXPECT_EQ(std::string(status.message()),
            path + ":6: prompt \"Sort: b a\" is not its group's (" + path +
                ":4: \"Sort: c a\"): each run of [rl] group_size = 3 rows is one prompt's "
                "group; keep a prompt's rows together");
}

TEST(RewardedRolloutsTest, LongPromptsAreShortenedInTheGroupError) {
  const std::string a(100, 'a'), b = std::string(100, 'a') + "b";
  const std::string path = testing::TempDir() + "/long.jsonl";
  const absl::Status status = CheckRolloutGroups(RowsOf("long.jsonl", {a, b}), 2);
  const std::string cut_a =
      "\"" + std::string(30, 'a') + "..." + std::string(30, 'a') + "\" (100 bytes)";
  const std::string cut_b =
      "\"" + std::string(30, 'a') + "..." + std::string(29, 'a') + "b\" (101 bytes)";
  EXPECT_EQ(std::string(status.message()),
            path + ":2: prompt " + cut_b + " is not its group's (" + path + ":1: " + cut_a +
                "): each run of [rl] group_size = 2 rows is one prompt's group; keep a prompt's "
                "rows together");
}

TEST(RewardedRolloutsTest, BadLinesNameFileLineAndField) {
  const std::string good = "{\"prompt\":\"Sort: b a\",\"response\":\"#### a b\",\"reward\":1}\n";
  const struct {
    std::string line;
    std::string error;
  } cases[] = {
      {R"({"prompt":"Sort: b a","response":"#### a b","reward":null})",
       ":2: \"reward\" must be a number, got null"},
      {R"({"prompt":"Sort: b a","response":"#### a b","reward":"high"})",
       ":2: \"reward\" must be a number, got \"high\""},
      {R"({"prompt":"Sort: b a","response":"#### a b","reward":true})",
       ":2: \"reward\" must be a number, got true"},
      {R"({"prompt":"Sort: b a","response":"#### a b","reward":1e999})",
       ":2: number overflow parsing '1e999'; write such a number as a string"},
      {R"({"prompt":"Sort: b a","response":"#### a b","reward":1e39})",
       ":2: \"reward\" is 1e+39, beyond float32's range (magnitude at most 3.4e38), where the "
       "update computes"},
      {R"({"prompt":"Sort: b a","response":"#### a b","reward":-1e39})",
       ":2: \"reward\" is -1e+39, beyond float32's range (magnitude at most 3.4e38), where the "
       "update computes"},
      {R"({"prompt":"Sort: b a","response":"#### a b"})", ":2: no \"reward\" field"},
      {R"({"prompt":"Sort: b a","reward":1})", ":2: no \"response\" field"},
      {R"({"prompt":null,"response":"#### a b","reward":1})",
       ":2: \"prompt\" must be a string, got null"},
      {R"({"prompt":"Sort: b a","response":7,"reward":1})",
       ":2: \"response\" must be a string, got number"},
      {R"({"prompt":5,"response":"#### a b","reward":1})",
       ":2: \"prompt\" must be a string, got number"},
      {"[1, 2]", ":2: expected a JSON object with prompt, response and reward"},
      {"not json",
       ":2: not valid JSON: parse error at line 1, column 2: syntax error while parsing value - "
       "invalid literal; last read: 'no'"},
      {"{\"prompt\":\"\xff\"}",
       ":2: not valid JSON: parse error at line 1, column 12: syntax error while parsing value - "
       "invalid string: ill-formed UTF-8 byte; last read: '\"\xff'"},
  };
  for (const auto& c : cases) {
    const std::string path = WriteTemp("bad.jsonl", good + c.line + "\n");
    const absl::Status status = ReadRewardedRollouts(path, "grpo").status();
    EXPECT_EQ(std::string(status.message()), path + c.error) << c.line;
  }
}

// A bad line's user data is quoted shortened: a 200 KB prompt or value would make a message as big.
TEST(RewardedRolloutsTest, BadLinesQuoteLongDataShortened) {
  const std::string big(200000, 'x');
  const struct {
    std::string line;
    std::string start;  // the error, past "path:1: "
    std::string end;
  } cases[] = {
      // A TAB must be escaped in a JSON string: nlohmann's error quotes what it read of the string.
      {absl::StrCat(R"({"prompt":")", big, "\t\"}"),
       "not valid JSON: parse error at line 1, column 200012: syntax error while parsing value - "
       "invalid string: control character U+0009 (HT) must be escaped to \\u0009 or \\t; last "
       "read: '\"xxx",
       "xxx<U+0009>' (200174 bytes)"},
      {absl::StrCat(R"({"prompt":"p","response":"r","reward":)", std::string(200000, '9'), "}"),
       "number overflow parsing '999", "999' (200026 bytes); write such a number as a string"},
      {absl::StrCat(R"({"prompt":"p","response":"r","reward":")", big, "\"}"),
       "\"reward\" must be a number, got \"" + std::string(30, 'x') + "..." + std::string(30, 'x') +
           "\" (200000 bytes)",
       ""},
      {R"({"prompt":"p","response":"r","reward":[[1,2],{"a":3}]})",
       "\"reward\" must be a number, got array", ""},
  };
  for (const auto& c : cases) {
    const std::string path = WriteTemp("long.jsonl", c.line + "\n");
    const std::string message(ReadRewardedRollouts(path, "grpo").status().message());
    const std::string shown = message.substr(0, 1000);
    EXPECT_LT(message.size(), path.size() + 500) << shown;
    EXPECT_TRUE(absl::StartsWith(message, path + ":1: " + c.start)) << shown;
    EXPECT_TRUE(absl::EndsWith(message, c.end)) << shown;
  }
}

TEST(RewardedRolloutsTest, PpoNeedsAResponseToPutItsRewardOn) {
  const std::string path =
      WriteTemp("empty_response.jsonl",
                "{\"prompt\":\"Sort: b a\",\"response\":\"#### a b\",\"reward\":1}\n"
                "{\"prompt\":\"Sort: c a\",\"response\":\"\",\"reward\":0}\n");
  EXPECT_EQ(ReadRewardedRollouts(path, "ppo").status().message(),
            path + ":2: \"response\" is empty: ppo puts the reward on its last token");
  // GRPO's empty response still has its reward in its group's baseline.
  EXPECT_TRUE(ReadRewardedRollouts(path, "grpo").ok());
  // Given ids are the response trained on: the text's emptiness does not count.
  const std::string ids_path =
      WriteTemp("text_empty_ids_not.jsonl",
                "{\"prompt\":\"Sort: b a\",\"response\":\"\",\"response_ids\":[7],\"reward\":1}\n");
  EXPECT_TRUE(ReadRewardedRollouts(ids_path, "ppo").ok());
}

// Empty ids leave no token to train on, whatever the algorithm (a sampled response has its stop
// token's at least).
TEST(RewardedRolloutsTest, EmptyResponseIdsAreRefusedInEveryAlgorithm) {
  const std::string path =
      WriteTemp("empty_ids.jsonl",
                "{\"prompt\":\"Sort: b a\",\"response\":\"x\",\"response_ids\":[],\"reward\":1}\n");
  for (const char* algorithm : {"grpo", "dapo", "ppo"}) {
    EXPECT_EQ(ReadRewardedRollouts(path, algorithm).status().message(),
              path +
                  ":1: \"response_ids\" is empty: no token to train on (a sampled response "
                  "has one at least, its stop token)")
        << algorithm;
  }
}

// A grpo rollouts row whose `field` is each of `cases`' values is refused with its error, after the
// file's name.
void ExpectRowFieldRefused(const std::string& field,
                           const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [value, error] : cases) {
    const std::string bad =
        WriteTemp(absl::StrCat("bad_", field, ".jsonl"),
                  absl::StrCat("{\"prompt\":\"p\",\"response\":\"r\",\"reward\":1,\"", field,
                               "\":", value, "}\n"));
    EXPECT_EQ(std::string(ReadRewardedRollouts(bad, "grpo").status().message()), bad + error)
        << value;
  }
}

// The sampled ids, where a row gives them: token ids (integers >= 0), any row or none; PPO's
// empty response is one without ids then.
TEST(RewardedRolloutsTest, ReadsResponseIdsWhereGiven) {
  const std::string path = WriteTemp(
      "ids.jsonl",
      "{\"prompt\":\"Sort: b a\",\"response\":\"\",\"reward\":1,\"response_ids\":[5,0,2041]}\n"
      "{\"prompt\":\"Sort: b a\",\"response\":\"a b\",\"reward\":0}\n");
  auto rollouts = ReadRewardedRollouts(path, "ppo");
  ASSERT_TRUE(rollouts.ok()) << rollouts.status();
  EXPECT_EQ((*rollouts)[0].response_ids, std::vector<int64_t>({5, 0, 2041}));
  EXPECT_FALSE((*rollouts)[1].response_ids.has_value());
  ExpectRowFieldRefused("response_ids",
                        {{"[1,\"x\"]", ":1: \"response_ids\"[1] is \"x\", not a token id"},
                         {"[-1]", ":1: \"response_ids\"[0] is -1, not a token id"},
                         {"[1.5]", ":1: \"response_ids\"[0] is 1.5, not a token id"},
                         {"7", ":1: \"response_ids\" must be an array of token ids, got number"}});
}

// The prompt ids a response was sampled after, where a row gives them: token ids, as
// response_ids; an empty list is refused, as an empty encoded prompt is.
TEST(RewardedRolloutsTest, ReadsPromptIdsWhereGiven) {
  const std::string path = WriteTemp(
      "prompt_ids.jsonl",
      "{\"prompt\":\"Sort: b a\",\"response\":\"a b\",\"reward\":1,\"prompt_ids\":[1,0,2041]}\n"
      "{\"prompt\":\"Sort: b a\",\"response\":\"a b\",\"reward\":0}\n");
  auto rollouts = ReadRewardedRollouts(path, "grpo");
  ASSERT_TRUE(rollouts.ok()) << rollouts.status();
  EXPECT_EQ((*rollouts)[0].prompt_ids, std::vector<int64_t>({1, 0, 2041}));
  EXPECT_FALSE((*rollouts)[1].prompt_ids.has_value());
  ExpectRowFieldRefused(
      "prompt_ids", {{"[1,\"x\"]", ":1: \"prompt_ids\"[1] is \"x\", not a token id"},
                     {"[-1]", ":1: \"prompt_ids\"[0] is -1, not a token id"},
                     {"null", ":1: \"prompt_ids\" must be an array of token ids, got null"},
                     {"[]", ":1: \"prompt_ids\" is empty: the response would follow no token"}});
}

// A group's rows condition on the same prompt: all give the same prompt_ids, or none does.
TEST(RewardedRolloutsTest, AGroupsRowsShareTheirPromptIds) {
  const std::string row = R"({"prompt":"Sort: b a","response":"r","reward":1)";
  auto group_of = [&](const std::string& name, const std::string& first,
                      const std::string& second) {
    auto rollouts = ReadRewardedRollouts(
        WriteTemp(name, absl::StrCat(row, first, "}\n", row, second, "}\n")), "grpo");
    return rollouts.ok() ? CheckRolloutGroups(*rollouts, 2) : rollouts.status();
  };
  EXPECT_TRUE(group_of("same_ids.jsonl", R"(,"prompt_ids":[1,2])", R"(,"prompt_ids":[1,2])").ok());
  const std::string path = testing::TempDir() + "/";
  const std::string tail =
      "; every row of a group gives the same prompt_ids, or none does): each run of [rl] "
      "group_size = 2 rows is one "
      "prompt's group; keep a prompt's rows together";
  EXPECT_EQ(
      std::string(group_of("other_ids.jsonl", R"(,"prompt_ids":[1,2])", R"(,"prompt_ids":[1,3])")
                      .message()),
      path + "other_ids.jsonl:2: \"prompt_ids\" are not its group's (" + path +
          "other_ids.jsonl:1" + tail);
  EXPECT_EQ(std::string(group_of("some_ids.jsonl", "", R"(,"prompt_ids":[1,2])").message()),
            path + "some_ids.jsonl:2: \"prompt_ids\" are not its group's (" + path +
                "some_ids.jsonl:1" + tail);
  // Groups apart may differ: each is its own prompt's.
  auto two_groups = ReadRewardedRollouts(
      WriteTemp("two_groups.jsonl", absl::StrCat(row, R"(,"prompt_ids":[1,2]})", "\n", row, "}\n")),
      "grpo");
  ASSERT_TRUE(two_groups.ok()) << two_groups.status();
  EXPECT_TRUE(CheckRolloutGroups(*two_groups, 1).ok());
}

TEST(RewardedRolloutsTest, EmptyFileIsRefused) {
  const std::string path = WriteTemp("empty.jsonl", "\n \n");
  EXPECT_EQ(ReadRewardedRollouts(path, "grpo").status().message(), path + ": no rollouts");
}

}  // namespace
}  // namespace titan
