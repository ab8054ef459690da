#include "lib/metrics/metrics_logger.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "lib/metrics/event.pb.h"
#include "lib/metrics/event_file_reader.h"
#include "lib/util/file_util.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

std::string TestDir(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

StepMetrics ExampleStep() {
  StepMetrics metrics;
  metrics.step = 12;
  metrics.loss = 5.1234;
  metrics.grad_norm = 1.2345;
  metrics.lr = 8e-4;
  metrics.tps = 12345;
  metrics.tflops = 0.12;
  metrics.mfu = 0.05;
  metrics.memory_gib = 0.52;
  return metrics;
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFile(path);
  EXPECT_TRUE(contents.ok()) << contents.status();
  std::vector<nlohmann::json> lines;
  if (!contents.ok()) return lines;
  EXPECT_TRUE(contents->empty() || contents->back() == '\n');
  for (absl::string_view line : absl::StrSplit(*contents, '\n', absl::SkipEmpty())) {
    lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

// The steps of metrics.jsonl's rows under `dump_folder`, in order.
std::vector<int64_t> LoggedSteps(const std::string& dump_folder) {
  std::vector<int64_t> steps;
  for (const nlohmann::json& line : ReadJsonLines(dump_folder + "/metrics.jsonl")) {
    steps.push_back(line["step"].get<int64_t>());
  }
  return steps;
}

// The events of the one event file in `folder` (none, with a test failure, otherwise).
std::vector<tensorboard::Event> TheEventFile(const std::string& folder) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    files.push_back(entry.path());
  }
  EXPECT_EQ(files.size(), 1u) << folder;
  if (files.size() != 1) return {};
  absl::StatusOr<std::vector<tensorboard::Event>> events = ReadEventFile(files[0]);
  EXPECT_TRUE(events.ok()) << events.status();
  return events.ok() ? *std::move(events) : std::vector<tensorboard::Event>{};
}

std::string StripAnsi(const std::string& text) {
  std::string plain;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\033') {
      i = text.find('m', i);
      continue;
    }
    plain.push_back(text[i]);
  }
  return plain;
}

TEST(FormatStepLineTest, PlainLine) {
  EXPECT_EQ(FormatStepLine(ExampleStep(), /*color=*/false),
            "step: 12  loss:  5.1234  grad_norm:  1.2345  lr: 8.0e-04  memory:  0.52GiB  "
            "tps: 12,345  tflops: 0.12  mfu: 0.05%");
}

TEST(FormatStepLineTest, ColorOnlyAddsEscapes) {
  const std::string colored = FormatStepLine(ExampleStep(), /*color=*/true);
  EXPECT_EQ(colored.rfind("\033[31mstep: 12", 0), 0u) << colored;
  EXPECT_EQ(StripAnsi(colored), FormatStepLine(ExampleStep(), /*color=*/false));
}

TEST(FormatStepLineTest, GroupsThousandsAndAppendsExtras) {
  StepMetrics metrics = ExampleStep();
  metrics.step = 3;
  metrics.tps = 1234567.6;
  metrics.validation_loss = 4.5;
  metrics.extra = {{"tokens_seen", 4096}};
  EXPECT_EQ(
      FormatStepLine(metrics, /*color=*/false),
      "step:  3  loss:  5.1234  grad_norm:  1.2345  lr: 8.0e-04  memory:  0.52GiB  "
      "tps: 1,234,568  tflops: 0.12  mfu: 0.05%  validation_loss:  4.5000  tokens_seen: 4096");
  metrics.tps = 999.4;
  EXPECT_NE(FormatStepLine(metrics, false).find("tps: 999  "), std::string::npos);
}

TEST(MetricsLoggerTest, AppendsOneJsonObjectPerStep) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("jsonl/dump");
  options.start.run_id = "r1";
  options.disable_color_printing = true;
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  ASSERT_TRUE((*logger)->Log(ExampleStep()).ok());
  // Written and flushed before the logger goes away: a crash here would keep the line.
  std::vector<nlohmann::json> lines = ReadJsonLines((*logger)->jsonl_path());
  ASSERT_EQ(lines.size(), 1u);
  std::vector<std::string> keys;
  for (const auto& item : lines[0].items()) keys.push_back(item.key());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"grad_norm", "loss", "lr", "memory_gib", "mfu", "step",
                                            "tflops", "tps"}));
  EXPECT_EQ(lines[0]["step"], 12);
  EXPECT_DOUBLE_EQ(lines[0]["loss"].get<double>(), 5.1234);
  EXPECT_DOUBLE_EQ(lines[0]["grad_norm"].get<double>(), 1.2345);
  EXPECT_DOUBLE_EQ(lines[0]["lr"].get<double>(), 8e-4);
  EXPECT_DOUBLE_EQ(lines[0]["tps"].get<double>(), 12345);
  EXPECT_DOUBLE_EQ(lines[0]["tflops"].get<double>(), 0.12);
  EXPECT_DOUBLE_EQ(lines[0]["mfu"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(lines[0]["memory_gib"].get<double>(), 0.52);

  StepMetrics next = ExampleStep();
  next.step = 13;
  next.loss = std::numeric_limits<double>::quiet_NaN();
  next.validation_loss = 4.25;
  ASSERT_TRUE((*logger)->Log(next).ok());
  lines = ReadJsonLines((*logger)->jsonl_path());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["step"], 13);
  EXPECT_TRUE(lines[1]["loss"].is_null());
  EXPECT_DOUBLE_EQ(lines[1]["validation_loss"].get<double>(), 4.25);
}

// Where the device's peak is unknown (a CPU) there is no mfu, rather than a 0.
TEST(MetricsLoggerTest, UnknownMfuIsLeftOut) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("no_mfu");
  options.start.run_id = "r1";
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  StepMetrics metrics = ExampleStep();
  metrics.mfu.reset();
  ASSERT_TRUE((*logger)->Log(metrics).ok());
  std::vector<nlohmann::json> lines = ReadJsonLines((*logger)->jsonl_path());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_FALSE(lines[0].contains("mfu")) << lines[0];
  EXPECT_TRUE(lines[0].contains("tflops")) << lines[0];
  EXPECT_EQ(FormatStepLine(metrics, /*color=*/false),
            "step: 12  loss:  5.1234  grad_norm:  1.2345  lr: 8.0e-04  memory:  0.52GiB  "
            "tps: 12,345  tflops: 0.12");
}

TEST(MetricsLoggerTest, ResumedRunAppendsToTheSameFile) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("resume");
  options.start.run_id = "r1";
  for (int step = 1; step <= 2; ++step) {
    absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
    ASSERT_TRUE(logger.ok()) << logger.status();
    StepMetrics metrics = ExampleStep();
    metrics.step = step;
    ASSERT_TRUE((*logger)->Log(metrics).ok());
    options.start.resumed_step = step;
  }
  EXPECT_EQ(LoggedSteps(options.dump_folder), (std::vector<int64_t>{1, 2}));
}

TEST(MetricsLoggerTest, AFreshRunSetsAnEarlierRunsRowsAsideAndHidesItsPoints) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("fresh_again");
  options.tensorboard_folder = TestDir("fresh_again/tb");
  std::filesystem::create_directories(options.dump_folder);
  const std::string earlier = "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2.25}\n";
  ASSERT_TRUE(WriteFileAtomically(options.dump_folder + "/metrics.jsonl", earlier).ok());
  options.start.run_id = "r2";
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  StepMetrics metrics = ExampleStep();
  metrics.step = 1;
  ASSERT_TRUE((*logger)->Log(metrics).ok());
  EXPECT_EQ(LoggedSteps(options.dump_folder), (std::vector<int64_t>{1}));
  EXPECT_EQ(*ReadFile(options.dump_folder + "/metrics.jsonl.abandoned-r2"), earlier);
  // A START at its first step hides the points earlier event files hold there and after.
  const std::vector<tensorboard::Event> events = TheEventFile(options.tensorboard_folder);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[1].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(events[1].step(), 1);
  EXPECT_EQ(events[2].step(), 1);
}

TEST(MetricsLoggerTest, ResumedRunDropsTheRowsAfterItsCheckpoint) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("resume_after_kill");
  options.start.run_id = "r1";
  {
    absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
    ASSERT_TRUE(logger.ok()) << logger.status();
    for (int step = 1; step <= 5; ++step) {  // killed after step 5, last checkpoint at step 3
      StepMetrics metrics = ExampleStep();
      metrics.step = step;
      ASSERT_TRUE((*logger)->Log(metrics).ok());
    }
  }
  options.start.resumed_step = 3;
  options.tensorboard_folder = TestDir("resume_after_kill/tb");
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  StepMetrics metrics = ExampleStep();
  metrics.step = 4;
  ASSERT_TRUE((*logger)->Log(metrics).ok());
  EXPECT_EQ(LoggedSteps(options.dump_folder), (std::vector<int64_t>{1, 2, 3, 4}));
  // TensorBoard hides the earlier files' points from step 4 on (tensorboard_reader_test).
  const std::vector<tensorboard::Event> events = TheEventFile(options.tensorboard_folder);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[1].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(events[1].step(), 4);
}

TEST(MetricsLoggerTest, ARestartTakesOverTheFilesOnlyWhenItCommits) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("restart");
  options.tensorboard_folder = TestDir("restart/tb");
  std::filesystem::create_directories(options.dump_folder);
  const std::string earlier = "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2.25}\n";
  ASSERT_TRUE(WriteFileAtomically(options.dump_folder + "/metrics.jsonl", earlier).ok());
  options.start.restart = true;
  options.start.run_id = "r7";
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  StepMetrics metrics = ExampleStep();
  metrics.step = 1;
  const double logged_from = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  ASSERT_TRUE((*logger)->Log(metrics).ok());
  const double logged_by = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  absl::SleepFor(absl::Milliseconds(300));  // The first save comes later.
  // Before the first save: the earlier run's history as it was, no TensorBoard file yet.
  EXPECT_EQ(*ReadFile(options.dump_folder + "/metrics.jsonl"), earlier);
  EXPECT_FALSE(std::filesystem::exists(options.tensorboard_folder));
  ASSERT_TRUE((*logger)->CommitRestart().ok());
  metrics.step = 2;
  ASSERT_TRUE((*logger)->Log(metrics).ok());
  EXPECT_EQ(*ReadFile(options.dump_folder + "/metrics.jsonl.abandoned-r7"), earlier);
  EXPECT_EQ(LoggedSteps(options.dump_folder), (std::vector<int64_t>{1, 2}));
  // A START at step 0 hides the earlier run's points, then this run's, the waiting ones first.
  const std::vector<tensorboard::Event> events = TheEventFile(options.tensorboard_folder);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[1].session_log().status(), tensorboard::SessionLog::START);
  EXPECT_EQ(events[1].step(), 0);
  EXPECT_EQ(events[2].step(), 1);
  EXPECT_EQ(events.back().step(), 2);
  // A waiting point keeps the time it was logged at, not its write's at the first save.
  EXPECT_GE(events[2].wall_time(), logged_from - 1e-3);
  EXPECT_LE(events[2].wall_time(), logged_by + 1e-3);
  EXPECT_LT(events[2].wall_time(), events[1].wall_time() - 0.2);
}

// A folder as a run on two ranks with save_for_all_ranks and TensorBoard leaves it, killed after
// step 5: rows and points of steps 1-5 in metrics.jsonl, rank_1/metrics.jsonl, tb/ and tb/rank_1.
MetricsLoggerOptions TwoRankFolder(const std::string& name) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir(name);
  options.start.run_id = "r1";
  for (const std::string& rank : {std::string(), std::string("/rank_1")}) {
    MetricsLoggerOptions earlier = options;
    earlier.dump_folder += rank;
    earlier.tensorboard_folder = options.dump_folder + "/tb" + rank;
    absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(earlier);
    EXPECT_TRUE(logger.ok()) << logger.status();
    for (int step = 1; logger.ok() && step <= 5; ++step) {
      StepMetrics metrics = ExampleStep();
      metrics.step = step;
      EXPECT_TRUE((*logger)->Log(metrics).ok());
    }
  }
  // The next run writes rank 0's metrics.jsonl alone, TensorBoard off.
  options.unwritten_dump_folders = {options.dump_folder + "/rank_1"};
  options.unwritten_tensorboard_folders = {options.dump_folder + "/tb",
                                           options.dump_folder + "/tb/rank_1"};
  return options;
}

// The step of the SessionLog START alone in an event file of `folder`, the one a later run added
// to TwoRankFolder's (-1: none, a test failure).
int64_t AddedStart(const std::string& folder) {
  std::vector<int64_t> starts;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (!entry.is_regular_file()) continue;
    absl::StatusOr<std::vector<tensorboard::Event>> events = ReadEventFile(entry.path());
    EXPECT_TRUE(events.ok()) << events.status();
    if (events.ok() && events->size() == 2 &&
        (*events)[1].session_log().status() == tensorboard::SessionLog::START) {
      starts.push_back((*events)[1].step());
    }
  }
  EXPECT_EQ(starts.size(), 1u) << folder;
  return starts.size() == 1 ? starts[0] : -1;
}

TEST(MetricsLoggerTest, AResumedRunDropsTheRedoneStepsFromOutputsItDoesNotWrite) {
  MetricsLoggerOptions options = TwoRankFolder("unwritten_resumed");
  options.start.resumed_step = 3;
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  EXPECT_EQ(LoggedSteps(options.dump_folder + "/rank_1"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(AddedStart(options.dump_folder + "/tb"), 4);
  EXPECT_EQ(AddedStart(options.dump_folder + "/tb/rank_1"), 4);
}

TEST(MetricsLoggerTest, AFreshRunSetsAsideAndHidesOutputsItDoesNotWrite) {
  MetricsLoggerOptions options = TwoRankFolder("unwritten_fresh");
  options.start.run_id = "r2";
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  EXPECT_FALSE(std::filesystem::exists(options.dump_folder + "/rank_1/metrics.jsonl"));
  EXPECT_TRUE(std::filesystem::exists(options.dump_folder + "/rank_1/metrics.jsonl.abandoned-r2"));
  EXPECT_EQ(AddedStart(options.dump_folder + "/tb"), 1);
  EXPECT_EQ(AddedStart(options.dump_folder + "/tb/rank_1"), 1);
}

TEST(MetricsLoggerTest, ARestartTakesOutputsItDoesNotWriteAlongWhenItCommits) {
  MetricsLoggerOptions options = TwoRankFolder("unwritten_restart");
  options.start.run_id = "r2";
  options.start.restart = true;
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  const std::string rank1 = options.dump_folder + "/rank_1/metrics.jsonl";
  EXPECT_EQ(LoggedSteps(options.dump_folder + "/rank_1"), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  ASSERT_TRUE((*logger)->CommitRestart().ok());
  EXPECT_FALSE(std::filesystem::exists(rank1));
  EXPECT_TRUE(std::filesystem::exists(rank1 + ".abandoned-r2"));
  EXPECT_EQ(AddedStart(options.dump_folder + "/tb"), 0);
  EXPECT_EQ(AddedStart(options.dump_folder + "/tb/rank_1"), 0);
}

TEST(MetricsLoggerTest, AnUncreatableTensorBoardFolderNamesItsKey) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("tb_not_a_folder");
  options.tensorboard_folder = "/dev/null/tb";
  options.start.run_id = "r1";
  EXPECT_EQ(MetricsLogger::Create(options).status().message(),
            "[metrics] save_tb_folder: cannot create the TensorBoard folder: /dev/null/tb: mkdir "
            "failed: Not a directory");
}

TEST(MetricsLoggerTest, ForwardsScalarsToTensorBoardUnderTorchtitanTags) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("tb_dump");
  options.tensorboard_folder = TestDir("tb_dump/tb");
  options.start.run_id = "r1";
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  StepMetrics metrics = ExampleStep();
  metrics.validation_loss = 4.5;
  metrics.extra = {{"tokens_seen", 4096}};
  ASSERT_TRUE((*logger)->Log(metrics).ok());

  const std::vector<tensorboard::Event> events = TheEventFile(options.tensorboard_folder);
  ASSERT_EQ(events.size(), 11u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[1].session_log().status(), tensorboard::SessionLog::START);
  const std::vector<std::pair<std::string, float>> expected = {
      {"loss_metrics/global_avg_loss", 5.1234f},
      {"grad_norm", 1.2345f},
      {"lr", 8e-4f},
      {"throughput(tps)", 12345.0f},
      {"tflops", 0.12f},
      {"mfu(%)", 0.05f},
      {"memory/max_reserved(GiB)", 0.52f},
      {"validation_metrics/loss", 4.5f},
      {"tokens_seen", 4096.0f}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const tensorboard::Event& event = events[i + 2];
    EXPECT_EQ(event.step(), 12);
    ASSERT_EQ(event.summary().value_size(), 1);
    EXPECT_EQ(event.summary().value(0).tag(), expected[i].first);
    EXPECT_EQ(event.summary().value(0).simple_value(), expected[i].second);
  }
}

TEST(MetricsLoggerTest, AnEvaluationOnlyRowHasNoUpdatesMetrics) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("evaluation_only");
  options.tensorboard_folder = TestDir("evaluation_only/tb");
  options.start.run_id = "r1";
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  StepMetrics metrics;
  metrics.evaluation_only = true;
  metrics.extra = {{"eval_reward", 0.25}};
  ASSERT_TRUE((*logger)->Log(metrics).ok());
  EXPECT_EQ(FormatStepLine(metrics, /*color=*/false), "step:  0  eval_reward: 0.25");
  const std::vector<nlohmann::json> lines = ReadJsonLines((*logger)->jsonl_path());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].dump(), R"({"eval_reward":0.25,"step":0})");
  const std::vector<tensorboard::Event> events = TheEventFile(options.tensorboard_folder);
  ASSERT_EQ(events.size(), 3u);  // file version, SessionLog START, the one scalar
  EXPECT_EQ(events[2].summary().value(0).tag(), "eval_reward");
}

// RL's step whose every group dynamic sampling dropped: no optimizer step measured a loss, a
// gradient or the update's throughput, so none is logged (its lr and memory were).
TEST(MetricsLoggerTest, AStepWithoutAnUpdateHasNoUpdatesMetrics) {
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("not_updated");
  options.tensorboard_folder = TestDir("not_updated/tb");
  options.start.run_id = "r1";
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  StepMetrics metrics = ExampleStep();
  metrics.updated = false;
  metrics.extra = {{"optimizer_steps", 0}};
  ASSERT_TRUE((*logger)->Log(metrics).ok());
  EXPECT_EQ(FormatStepLine(metrics, /*color=*/false),
            "step: 12  lr: 8.0e-04  memory:  0.52GiB  optimizer_steps: 0");
  const std::vector<nlohmann::json> lines = ReadJsonLines((*logger)->jsonl_path());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0].dump(), R"({"lr":0.0008,"memory_gib":0.52,"optimizer_steps":0.0,"step":12})");
  std::vector<std::string> tags;
  for (const tensorboard::Event& event : TheEventFile(options.tensorboard_folder)) {
    if (event.has_summary()) tags.push_back(event.summary().value(0).tag());
  }
  EXPECT_EQ(tags, (std::vector<std::string>{"lr", "memory/max_reserved(GiB)", "optimizer_steps"}));
}

TEST(MetricsLoggerTest, ALoggerThatLogsNothingLeavesNoFile) {
  // A run killed before its first logged step leaves no empty metrics.jsonl behind.
  MetricsLoggerOptions options;
  options.dump_folder = TestDir("nothing_logged");
  options.start.run_id = "r1";
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create(options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  EXPECT_FALSE(std::filesystem::exists((*logger)->jsonl_path()));
  ASSERT_TRUE((*logger)->Log(ExampleStep()).ok());
  EXPECT_EQ(ReadJsonLines((*logger)->jsonl_path()).size(), 1u);
}

TEST(MetricsLoggerTest, RejectsMissingDumpFolder) {
  absl::StatusOr<std::unique_ptr<MetricsLogger>> logger = MetricsLogger::Create({});
  ASSERT_FALSE(logger.ok());
  EXPECT_NE(logger.status().message().find("dump_folder"), absl::string_view::npos);
}

}  // namespace
}  // namespace titan
