#include "lib/profiling/step_profiler.h"

#include <ATen/ATen.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <csignal>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/test_dir.h"
#include "lib/config/job_config.h"
#include "lib/profiling/phase_range.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/gzip_file.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

StepProfilerOptions TraceOptions(const std::string& folder, int freq, int warmup, int active) {
  StepProfilerOptions options;
  options.enable_profiling = true;
  options.traces_folder = folder;
  options.profile_freq = freq;
  options.warmup = warmup;
  options.active = active;
  options.rank = 2;
  return options;
}

std::unique_ptr<StepProfiler> MustCreate(const StepProfilerOptions& options) {
  absl::StatusOr<std::unique_ptr<StepProfiler>> profiler = StepProfiler::Create(options);
  EXPECT_TRUE(profiler.ok()) << profiler.status();
  return profiler.ok() ? std::move(*profiler) : nullptr;
}

std::string CreateError(const StepProfilerOptions& options) {
  return std::string(StepProfiler::Create(options).status().message());
}

// A tiny training step: matmul forward, autograd backward, SGD update, each in its PhaseRange.
void RunSteps(StepProfiler* profiler, int64_t first, int64_t last) {
  at::Tensor weight = torch::randn({32, 32}, torch::requires_grad());
  const at::Tensor input = torch::randn({16, 32});
  for (int64_t step = first; step <= last; ++step) {
    const absl::Status begun = profiler->StepBegin(step);
    ASSERT_TRUE(begun.ok()) << begun;
    at::Tensor loss;
    {
      PhaseRange range("forward");
      loss = at::mm(input, weight).sum();
    }
    {
      PhaseRange range("backward");
      loss.backward();
    }
    {
      PhaseRange range("optimizer");
      torch::NoGradGuard no_grad;
      weight.sub_(weight.grad() * 0.01);
      weight.mutable_grad().zero_();
    }
    const absl::Status ended = profiler->StepEnd(step);
    ASSERT_TRUE(ended.ok()) << ended;
  }
}

std::vector<std::string> SortedListing(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(dir);
  EXPECT_TRUE(names.ok()) << names.status();
  if (!names.ok()) return {};
  std::sort(names->begin(), names->end());
  return *names;
}

struct Trace {
  std::vector<nlohmann::json> events;  // the complete ("X") events

  std::vector<nlohmann::json> Named(const std::string& name) const {
    std::vector<nlohmann::json> out;
    for (const nlohmann::json& event : events) {
      if (event["name"] == name) out.push_back(event);
    }
    return out;
  }

  std::vector<std::string> StepMarkers() const {
    std::vector<std::string> out;
    for (const nlohmann::json& event : events) {
      const std::string name = event["name"];
      if (absl::StartsWith(name, "ProfilerStep#")) out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }
};

Trace LoadTrace(const std::string& path) {
  absl::StatusOr<std::string> text = ReadPlainOrGzipFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  Trace trace;
  if (!text.ok()) return trace;
  const nlohmann::json json = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(json.is_discarded()) << path << " is not JSON";
  if (json.is_discarded()) return trace;
  for (const nlohmann::json& event : json["traceEvents"]) {
    if (event.value("ph", "") == "X") trace.events.push_back(event);
  }
  return trace;
}

bool Within(const nlohmann::json& inner, const nlohmann::json& outer) {
  const double start = outer["ts"], end = start + outer["dur"].get<double>();
  const double inner_start = inner["ts"];
  return inner_start >= start && inner_start + inner["dur"].get<double>() <= end + 1e-3;
}

// freq 3, warmup 1, active 1: step 1 idle, 2 warmup, 3 traced, and again from step 4.
TEST(StepProfilerTest, TracesTheActiveStepOfEachCycle) {
  const std::string folder = TestDir("traces");
  std::unique_ptr<StepProfiler> profiler = MustCreate(TraceOptions(folder, 3, 1, 1));
  ASSERT_NE(profiler, nullptr);
  RunSteps(profiler.get(), 1, 7);
  profiler.reset();  // step 7 is idle: nothing is left to save

  EXPECT_THAT(SortedListing(folder), ElementsAre("iteration_3", "iteration_6"));
  for (int step : {3, 6}) {
    SCOPED_TRACE(step);
    const std::string dir = absl::StrCat(folder, "/iteration_", step);
    EXPECT_THAT(SortedListing(dir), ElementsAre("rank2_trace.json"));
    const Trace trace = LoadTrace(dir + "/rank2_trace.json");
    EXPECT_THAT(trace.StepMarkers(), ElementsAre(absl::StrCat("ProfilerStep#", step)));
    const std::vector<nlohmann::json> marker = trace.Named(absl::StrCat("ProfilerStep#", step));
    ASSERT_EQ(marker.size(), 1u);
    for (const char* phase : {"forward", "backward", "optimizer"}) {
      const std::vector<nlohmann::json> ranges = trace.Named(phase);
      ASSERT_EQ(ranges.size(), 1u) << phase;
      EXPECT_TRUE(Within(ranges[0], marker[0])) << phase;
    }
    // Forward's mm and backward's gradient mm; only the traced step's are kept.
    const std::vector<nlohmann::json> mms = trace.Named("aten::mm");
    ASSERT_GE(mms.size(), 2u);
    for (const nlohmann::json& mm : mms) EXPECT_TRUE(Within(mm, marker[0])) << mm.dump();
    // record_shapes: the forward mm's operand shapes.
    EXPECT_EQ(mms[0]["args"]["Input Dims"], nlohmann::json::parse("[[16, 32], [32, 32]]"));
  }
}

// profile_run's layout: one cycle's trace as <folder>/trace_rank<r>.json.gz.
TEST(StepProfilerTest, SingleCycleFilesGzipped) {
  const std::string folder = TestDir("traces");
  StepProfilerOptions options = TraceOptions(folder, 3, 1, 2);
  options.single_cycle_files = true;
  options.gzip_traces = true;
  std::unique_ptr<StepProfiler> profiler = MustCreate(options);
  ASSERT_NE(profiler, nullptr);
  EXPECT_EQ(profiler->TracePath(3), folder + "/trace_rank2.json.gz");
  RunSteps(profiler.get(), 1, 3);
  EXPECT_THAT(SortedListing(folder), ElementsAre("trace_rank2.json.gz"));
  const Trace trace = LoadTrace(folder + "/trace_rank2.json.gz");
  EXPECT_THAT(trace.StepMarkers(), ElementsAre("ProfilerStep#2", "ProfilerStep#3"));
  EXPECT_GE(trace.Named("aten::mm").size(), 4u);
}

// A run resumed at step 3 with freq 4, no warmup, 2 traced steps: cycles end at 4 and 8.
TEST(StepProfilerTest, ResumedRunStaysOnTheCycleAndTracesSeveralSteps) {
  const std::string folder = TestDir("traces");
  std::unique_ptr<StepProfiler> profiler = MustCreate(TraceOptions(folder, 4, 0, 2));
  ASSERT_NE(profiler, nullptr);
  RunSteps(profiler.get(), 3, 8);

  EXPECT_THAT(SortedListing(folder), ElementsAre("iteration_4", "iteration_8"));
  EXPECT_THAT(LoadTrace(folder + "/iteration_4/rank2_trace.json").StepMarkers(),
              ElementsAre("ProfilerStep#3", "ProfilerStep#4"));
  EXPECT_THAT(LoadTrace(folder + "/iteration_8/rank2_trace.json").StepMarkers(),
              ElementsAre("ProfilerStep#7", "ProfilerStep#8"));
}

// As torch.profiler on exit: a cycle cut short after its first traced step is saved under it.
TEST(StepProfilerTest, CycleCutShortIsSavedOnDestruction) {
  const std::string folder = TestDir("traces");
  std::unique_ptr<StepProfiler> profiler = MustCreate(TraceOptions(folder, 4, 1, 2));
  ASSERT_NE(profiler, nullptr);
  RunSteps(profiler.get(), 1, 3);
  EXPECT_THAT(SortedListing(folder), IsEmpty());
  profiler.reset();
  EXPECT_THAT(SortedListing(folder), ElementsAre("iteration_3"));
  EXPECT_THAT(LoadTrace(folder + "/iteration_3/rank2_trace.json").StepMarkers(),
              ElementsAre("ProfilerStep#3"));
}

// Stopped during warmup: nothing was traced, nothing is written, and a new profiler can start.
TEST(StepProfilerTest, WarmupCutShortWritesNothing) {
  const std::string folder = TestDir("traces");
  std::unique_ptr<StepProfiler> profiler = MustCreate(TraceOptions(folder, 4, 2, 1));
  ASSERT_NE(profiler, nullptr);
  RunSteps(profiler.get(), 1, 2);
  profiler.reset();
  EXPECT_THAT(SortedListing(folder), IsEmpty());

  profiler = MustCreate(TraceOptions(folder, 1, 0, 1));
  RunSteps(profiler.get(), 1, 1);
  EXPECT_THAT(SortedListing(folder), ElementsAre("iteration_1"));
}

TEST(StepProfilerTest, TraceThatCannotBeWrittenIsAnError) {
  const std::string folder = TestDir("traces");
  // Kineto writes <trace>.tmp first; a directory in its place makes that fail.
  ASSERT_TRUE(MakeDirectories(folder + "/iteration_1/rank2_trace.json.tmp").ok());
  std::unique_ptr<StepProfiler> profiler = MustCreate(TraceOptions(folder, 1, 0, 1));
  ASSERT_NE(profiler, nullptr);
  ASSERT_TRUE(profiler->StepBegin(1).ok());
  EXPECT_EQ(
      profiler->StepEnd(1).message(),
      absl::StrCat("Kineto wrote no trace to ", folder, "/iteration_1/rank2_trace.json: ", folder,
                   "/iteration_1/rank2_trace.json.tmp, its temporary file, is a "
                   "folder"));
}

TEST(StepProfilerTest, TraceCutShortByAFullDiskLeavesNoPartialFile) {
  const std::string folder = TestDir("traces");
  std::unique_ptr<StepProfiler> profiler = MustCreate(TraceOptions(folder, 1, 0, 1));
  ASSERT_NE(profiler, nullptr);
  ASSERT_TRUE(profiler->StepBegin(1).ok());
  for (int i = 0; i < 10; ++i) at::mm(torch::randn({16, 16}), torch::randn({16, 16}));
  // A file size limit fails Kineto's write part-way, as a full disk does (EFBIG, not a signal).
  signal(SIGXFSZ, SIG_IGN);
  rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &limit), 0);
  rlimit small = limit;
  small.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status status = profiler->StepEnd(1);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  EXPECT_EQ(status.message(),
            absl::StrCat("Kineto wrote no trace to ", folder,
                         "/iteration_1/rank2_trace.json: the file size limit (ulimit -f: 1024 "
                         "bytes) stopped the trace at 1024 bytes"));
  EXPECT_FALSE(PathExists(folder + "/iteration_1/rank2_trace.json.tmp"));
}

TEST(StepProfilerTest, DisabledIsNullAndWritesNothing) {
  const std::string folder = TestDir("traces");
  StepProfilerOptions options = TraceOptions(folder, 3, 1, 1);
  options.enable_profiling = false;
  options.warmup = 5;  // as torchtitan, the cycle is only checked when profiling
  absl::StatusOr<std::unique_ptr<StepProfiler>> profiler = StepProfiler::Create(options);
  ASSERT_TRUE(profiler.ok()) << profiler.status();
  EXPECT_EQ(*profiler, nullptr);
  { PhaseRange range("forward"); }  // no profiler running: records nothing
  EXPECT_FALSE(PathExists(folder));
}

TEST(StepProfilerTest, FoldersAreJoinedAsTorchtitanJoinsThem) {
  JobConfig config;
  config.mutable_job()->set_dump_folder("/runs/a");
  config.mutable_profiling()->set_save_traces_folder("traces");
  config.mutable_profiling()->set_save_memory_snapshot_folder("/scratch/snapshots");
  const StepProfilerOptions options = ProfilerOptionsFromConfig(config, 0, at::kCPU, "");
  EXPECT_EQ(options.traces_folder, "/runs/a/traces");
  EXPECT_EQ(options.memory_snapshot_folder, "/scratch/snapshots");  // absolute: as is
}

TEST(StepProfilerTest, CreateNamesTheKeyAtFault) {
  const std::string folder = TestDir("traces");
  EXPECT_EQ(CreateError(TraceOptions(folder, 3, 3, 1)),
            "[profiling] profiler_warmup=3 + profiler_active=1 exceeds profile_freq=3: a cycle "
            "must fit its warmup and traced steps");
  // warmup + active past INT_MAX must not wrap negative and pass.
  EXPECT_EQ(CreateError(TraceOptions(folder, 3, 2147483647, 1)),
            "[profiling] profiler_warmup=2147483647 + profiler_active=1 exceeds profile_freq=3: "
            "a cycle must fit its warmup and traced steps");
  EXPECT_EQ(CreateError(TraceOptions(folder, 3, 1, 0)),
            "[profiling] profiler_active=0: expected >= 1");
  EXPECT_EQ(CreateError(TraceOptions(folder, 3, -1, 1)),
            "[profiling] profiler_warmup=-1: expected >= 0");
  EXPECT_EQ(CreateError(TraceOptions(folder, 0, 0, 1)),
            "[profiling] profile_freq=0: expected >= 1");
  StepProfilerOptions memory;
  memory.enable_memory_snapshot = true;
  memory.memory_snapshot_folder = TestDir("memory");
  EXPECT_EQ(CreateError(memory), "[profiling] enable_memory_snapshot: needs a CUDA device");
  EXPECT_FALSE(PathExists(folder));
  EXPECT_FALSE(PathExists(memory.memory_snapshot_folder));
}

TEST(StepProfilerTest, StepsMustPair) {
  std::unique_ptr<StepProfiler> profiler = MustCreate(TraceOptions(TestDir("traces"), 3, 1, 1));
  ASSERT_NE(profiler, nullptr);
  EXPECT_EQ(profiler->StepEnd(1).message(), "StepEnd(1) without StepBegin");
  EXPECT_EQ(profiler->StepBegin(0).message(), "step 0: expected >= 1");
  ASSERT_TRUE(profiler->StepBegin(1).ok());
  EXPECT_EQ(profiler->StepBegin(2).message(), "StepBegin(2) before StepEnd(1)");
  EXPECT_EQ(profiler->StepEnd(2).message(), "StepEnd(2) while step 1 runs");
  EXPECT_TRUE(profiler->StepEnd(1).ok());
}

// One profiler per thread: a second is refused with a status and leaves the first's trace whole.
TEST(StepProfilerTest, SecondProfilerIsRefused) {
  const std::string first_folder = TestDir("first"), second_folder = TestDir("second");
  std::unique_ptr<StepProfiler> first = MustCreate(TraceOptions(first_folder, 1, 0, 1));
  std::unique_ptr<StepProfiler> second = MustCreate(TraceOptions(second_folder, 1, 0, 1));
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(first->StepBegin(1).ok());
  const absl::Status refused = second->StepBegin(1);
  EXPECT_EQ(refused.message(), "cannot start the profiler at step 1: another profiler is running");
  EXPECT_TRUE(first->StepEnd(1).ok());
  EXPECT_TRUE(second->StepEnd(1).ok());
  EXPECT_THAT(SortedListing(first_folder), ElementsAre("iteration_1"));
  EXPECT_THAT(SortedListing(second_folder), IsEmpty());
}

TEST(StepProfilerTest, OptionsFromConfig) {
  absl::StatusOr<JobConfig> config = ParseJobConfigText(
      "[job]\ndump_folder = \"/runs/a\"\n[profiling]\nenable_profiling = true\n"
      "save_traces_folder = \"tr\"\nprofile_freq = 5\nprofiler_active = 2\n",
      "x.toml", {"--profiling.enable_memory_snapshot"});
  ASSERT_TRUE(config.ok()) << config.status();
  const StepProfilerOptions options =
      ProfilerOptionsFromConfig(*config, 3, c10::Device(c10::kCUDA, 1), R"({"rank": 3})");
  EXPECT_TRUE(options.enable_profiling);
  EXPECT_EQ(options.traces_folder, "/runs/a/tr");
  EXPECT_EQ(options.profile_freq, 5);
  EXPECT_EQ(options.warmup, 3);  // torchtitan's default
  EXPECT_EQ(options.active, 2);
  EXPECT_TRUE(options.enable_memory_snapshot);
  EXPECT_EQ(options.memory_snapshot_folder, "/runs/a/memory_snapshot");
  EXPECT_EQ(options.rank, 3);
  EXPECT_EQ(options.device, c10::Device(c10::kCUDA, 1));
  EXPECT_EQ(options.distributed_info, R"({"rank": 3})");
}

}  // namespace
}  // namespace titan
