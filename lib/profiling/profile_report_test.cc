#include "lib/profiling/profile_report.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RankProfile Profile(int rank) {
  TraceAnalysis analysis;
  analysis.steps = {{3, 100, 60, 30, 10}, {4, 120, 70, 35, 15}};
  for (int i = 0; i < 25; ++i) {
    OpStats op;
    op.name = i == 0 ? "aten::mm<&\"'>" : absl::StrCat("aten::op", i);
    op.calls = i + 1;
    op.self_ms = 50 - i;
    op.total_ms = 60 - i;
    op.flops = i == 0 ? 2e9 : 0;
    op.input_shapes = "[[1024,256],[256,256]]";
    op.shape_variants = i == 0 ? 3 : 1;
    // Every fifth op ran on another thread: not part of the step's time.
    op.place = i % 5 == 4 ? OpPlace::kOtherThread : OpPlace::kStepThread;
    analysis.ops.push_back(op);
  }
  RankProfile profile = MakeRankProfile(rank, absl::StrCat("trace_rank", rank, ".json"), analysis);
  MemoryTimeline& m = profile.memory;
  for (int i = 0; i < 5; ++i) {
    MemorySample s;
    s.time_ms = 10.0 * i;
    s.bytes = {100, 20 * i, 200, 1000 * (i % 3), 7, 1};
    m.samples.push_back(s);
  }
  m.peak = m.samples[2];
  m.max_bytes = {100, 80, 200, 2000, 7, 1};
  m.step_starts = {{3, 0.0}, {4, 20.0}};
  m.events = 9;
  return profile;
}

TEST(ProfileReportTest, TopOpsAreTheFirstRowsInStepTime) {
  const RankProfile profile = Profile(0);
  // 25 ops, 5 of them (4, 9, ..., 24) on other threads.
  ASSERT_EQ(profile.top_ops.size(), kTopOps);
  EXPECT_EQ(profile.top_ops[4].name, "aten::op5");
  EXPECT_EQ(profile.top_ops.back().name, "aten::op23");
  // 50 + 49 + ... + 27 without 46, 41, 36, 31: 20 ops.
  EXPECT_DOUBLE_EQ(profile.top_ops_self_ms, 24 * (50 + 27) / 2.0 - (46 + 41 + 36 + 31));
  ASSERT_EQ(profile.other_ops.size(), kTopOtherOps);
  EXPECT_EQ(profile.other_ops[0].name, "aten::op4");
  EXPECT_EQ(profile.other_ops[0].place, OpPlace::kOtherThread);
}

TEST(ProfileReportTest, RankProfileSurvivesJson) {
  const RankProfile original = Profile(3);
  absl::StatusOr<RankProfile> back =
      RankProfileFromJson(nlohmann::json::parse(RankProfileToJson(original).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(RankProfileToJson(*back), RankProfileToJson(original));
  EXPECT_EQ(back->memory.samples[3].bytes[3], 0);
  EXPECT_EQ(back->top_ops[0].name, "aten::mm<&\"'>");
  EXPECT_EQ(back->top_ops[1].flops, 0);
  EXPECT_EQ(back->other_ops[1].name, "aten::op9");
  EXPECT_EQ(back->other_ops[1].place, OpPlace::kOtherThread);
  EXPECT_FALSE(RankProfileFromJson(nlohmann::json::object()).ok());
}

TEST(ProfileReportTest, SummaryHasStepTimeSplitAndPeakByCategory) {
  ProfileRunInfo info;
  info.model = "llama3 debugmodel";
  info.world_size = 2;
  const nlohmann::json summary = SummaryJson(info, {Profile(0), Profile(1)});
  ASSERT_EQ(summary["ranks"].size(), 2u);
  const nlohmann::json& rank = summary["ranks"][1];
  EXPECT_EQ(rank["rank"], 1);
  EXPECT_DOUBLE_EQ(rank["step_time_ms"].get<double>(), 110);
  EXPECT_DOUBLE_EQ(rank["breakdown_ms"]["compute"].get<double>(), 65);
  EXPECT_DOUBLE_EQ(rank["breakdown_ms"]["exposed_comm"].get<double>(), 32.5);
  EXPECT_DOUBLE_EQ(rank["breakdown_ms"]["idle"].get<double>(), 12.5);
  EXPECT_EQ(rank["peak_memory_bytes"], 100 + 40 + 200 + 2000 + 7 + 1);
  EXPECT_EQ(rank["peak_memory_by_category"]["activations"], 2000);
  EXPECT_EQ(rank["peak_memory_by_category"]["optimizer_state"], 200);
  EXPECT_EQ(rank["max_memory_by_category"]["gradients"], 80);
  EXPECT_DOUBLE_EQ(rank["top_ops_share_of_step_time"].get<double>(), 770.0 / 220);
  EXPECT_EQ(rank["top_ops"].size(), kTopOps);
  EXPECT_EQ(rank["other_ops"][0]["where"], "other thread");
  EXPECT_FALSE(rank.contains("samples"));
  // Under gradient accumulation a step is every microbatch on every data-parallel rank.
  info.local_batch_size = 1;
  info.seq_len = 32;
  info.microbatches = 3;
  info.dp_size = 2;
  const nlohmann::json accumulated = SummaryJson(info, {});
  EXPECT_EQ(accumulated["microbatches_per_step"], 3);
  EXPECT_EQ(accumulated["global_batch_size"], 6);
  EXPECT_EQ(accumulated["tokens_per_step"], 6 * 32);
  EXPECT_THAT(ReportHtml(info, {Profile(0)}),
              HasSubstr("steps, each of 3 microbatch(es) of 1 x 32 tokens per rank, 192 tokens "
                        "per step in all."));
  EXPECT_THAT(SummaryLine(Profile(1)),
              HasSubstr("rank 1: step 110.0 ms = compute 65.0 + exposed comm 32.5 + idle 12.5"));
}

TEST(ProfileReportTest, HtmlIsSelfContainedWithThePlots) {
  ProfileRunInfo info;
  info.model = "llama3 debugmodel";
  const std::string html = ReportHtml(info, {Profile(0), Profile(1)});
  // Step-time bars, one memory timeline per rank, the top-ops bars.
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(html, "<svg ")).size() - 1, 4u);
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(html, "</svg>")).size() - 1, 4u);
  EXPECT_THAT(html, Not(HasSubstr("<script")));
  EXPECT_THAT(html, Not(HasSubstr("src=")));
  EXPECT_THAT(html, Not(HasSubstr("href=")));
  EXPECT_THAT(html, Not(HasSubstr("@import")));
  // Names are escaped wherever they appear.
  EXPECT_THAT(html, Not(HasSubstr("aten::mm<&")));
  EXPECT_THAT(html, HasSubstr("aten::mm&lt;&amp;&quot;&#39;&gt;"));
  EXPECT_THAT(html, HasSubstr("exposed communication"));
  EXPECT_THAT(html, HasSubstr("optimizer_state"));
}

// A GPU run whose trace has no kernels (no CUPTI) says so in the report, naming the rank; a CPU
// run, or a GPU run with kernels, does not.
TEST(ProfileReportTest, GpuTraceWithoutKernelsIsFlagged) {
  ProfileRunInfo info;
  info.device = "NVIDIA H200";
  RankProfile with_kernels = Profile(0);
  with_kernels.device_timeline = true;
  const RankProfile host_only = Profile(1);
  EXPECT_THAT(ReportHtml(info, {with_kernels, host_only}),
              HasSubstr("traces of rank(s) 1 hold no GPU kernels"));
  EXPECT_EQ(MissingDeviceTimelineWarning(info, {with_kernels}), "");
  info.device = "cpu";
  EXPECT_EQ(MissingDeviceTimelineWarning(info, {host_only}), "");
  EXPECT_EQ(SummaryJson(info, {with_kernels, host_only})["ranks"][1]["timeline"], "host");
}

}  // namespace
}  // namespace titan
