#include "lib/profiling/trace_analysis.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using ::testing::HasSubstr;

nlohmann::json Event(const std::string& name, const std::string& category, double ts, double dur,
                     int tid = 1, const char* dims = nullptr) {
  nlohmann::json event = {{"ph", "X"},  {"cat", category}, {"name", name}, {"pid", 100},
                          {"tid", tid}, {"ts", ts},        {"dur", dur}};
  if (dims != nullptr) event["args"] = {{"Input Dims", nlohmann::json::parse(dims)}};
  return event;
}

const OpStats* Find(const TraceAnalysis& analysis, const std::string& name) {
  for (const OpStats& op : analysis.ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

// Two steps on thread 1 (times in µs), a busy op on another thread, metadata and instant events.
nlohmann::json CpuTrace() {
  nlohmann::json events = nlohmann::json::array({
      {{"ph", "M"}, {"name", "thread_name"}, {"pid", 100}, {"tid", 1}},
      {{"ph", "i"}, {"name", "marker"}, {"ts", 5}},
      Event("ProfilerStep#3", "user_annotation", 0, 1000),
      Event("forward", "user_annotation", 10, 390),
      Event("aten::mm", "cpu_op", 20, 200, 1, "[[4, 8], [8, 16]]"),
      Event("aten::add", "cpu_op", 250, 50, 1, "[[4, 16], [4, 16], []]"),
      Event("comm:all_reduce", "user_annotation", 420, 10),
      Event("comm:all_reduce:wait", "user_annotation", 430, 170),
      Event("aten::mm", "cpu_op", 650, 100, 1, "[[2, 3], [3, 5]]"),
      Event("aten::copy_", "cpu_op", 100, 800, 2),
      Event("ProfilerStep#4", "user_annotation", 1000, 500),
      Event("aten::mm", "cpu_op", 1100, 100, 1, "[[4, 8], [8, 16]]"),
  });
  return {{"traceEvents", events}};
}

TEST(TraceAnalysisTest, SplitsCpuStepsAndTablesOps) {
  absl::StatusOr<TraceAnalysis> analysis = AnalyzeTrace(CpuTrace(), "cpu.json");
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  EXPECT_FALSE(analysis->device_timeline);
  ASSERT_EQ(analysis->steps.size(), 2u);
  const StepTime& third = analysis->steps[0];
  EXPECT_EQ(third.step, 3);
  EXPECT_DOUBLE_EQ(third.duration_ms, 1.0);
  // Ops on the step's thread: 200 + 50 + 100 µs; collectives 10 + 170 µs; the other thread's
  // copy_ does not count.
  EXPECT_DOUBLE_EQ(third.compute_ms, 0.35);
  EXPECT_DOUBLE_EQ(third.exposed_comm_ms, 0.18);
  EXPECT_DOUBLE_EQ(third.idle_ms, 0.47);
  EXPECT_EQ(analysis->steps[1].step, 4);
  EXPECT_DOUBLE_EQ(analysis->steps[1].compute_ms, 0.1);
  EXPECT_DOUBLE_EQ(analysis->steps[1].idle_ms, 0.4);

  ASSERT_EQ(analysis->ops[0].name, "aten::copy_");  // the most self time first
  EXPECT_EQ(analysis->ops[0].place, OpPlace::kOtherThread);
  EXPECT_FALSE(analysis->InStepTime(analysis->ops[0]));
  const OpStats* mm = Find(*analysis, "aten::mm");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->calls, 3);
  EXPECT_DOUBLE_EQ(mm->self_ms, 0.4);
  EXPECT_DOUBLE_EQ(mm->total_ms, 0.4);
  EXPECT_DOUBLE_EQ(mm->flops, 2 * (2.0 * 4 * 8 * 16) + 2.0 * 2 * 3 * 5);
  EXPECT_EQ(mm->input_shapes, "[[4,8],[8,16]]");
  EXPECT_EQ(mm->shape_variants, 2);
  EXPECT_EQ(mm->place, OpPlace::kStepThread);
  EXPECT_TRUE(analysis->InStepTime(*mm));
  const OpStats* forward = Find(*analysis, "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_DOUBLE_EQ(forward->self_ms, 0.14);  // 390 - 200 - 50 µs
  EXPECT_DOUBLE_EQ(forward->total_ms, 0.39);
  EXPECT_EQ(Find(*analysis, "ProfilerStep#3"), nullptr);
  EXPECT_EQ(Find(*analysis, "aten::add")->flops, 0);  // not a matrix product

  const std::string table = FormatOpTable(*analysis, 3);
  EXPECT_THAT(table, HasSubstr("self ms"));
  EXPECT_THAT(table, HasSubstr("aten::mm"));
  EXPECT_THAT(table, HasSubstr("[[4,8],[8,16]] (+1 more)"));
  EXPECT_THAT(table, HasSubstr("other thread"));
  // Shown: copy_ (another thread's), mm 0.4 and the all-reduce wait 0.17 of 1.5 ms.
  EXPECT_THAT(table, HasSubstr("3 of 6 ops shown; those on the step thread hold 38.0% of the "
                               "1.50 ms of 2 traced steps"));
}

// Under pipeline parallelism c10d's Gloo send range lives from its issue (inside comm:send) until
// the peer receives: it must neither swallow the ops that follow nor count in the step's time.
// Autograd's cpu_op wrappers around ATen ops are bookkeeping: only the ATen ops inside count.
TEST(TraceAnalysisTest, AutogradWrappersAreNotCompute) {
  nlohmann::json events = nlohmann::json::array({
      Event("ProfilerStep#1", "user_annotation", 0, 1000),
      Event("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 100, 400),
      Event("MmBackward0", "cpu_op", 110, 380),
      Event("aten::mm", "cpu_op", 150, 200, 1, "[[4, 8], [8, 16]]"),
      Event("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", "cpu_op", 600,
            200),
      Event("torch::autograd::AccumulateGrad", "cpu_op", 610, 180),
      Event("aten::add_", "cpu_op", 650, 50),
  });
  absl::StatusOr<TraceAnalysis> analysis =
      AnalyzeTrace(nlohmann::json{{"traceEvents", events}}, "autograd.json");
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  ASSERT_EQ(analysis->steps.size(), 1u);
  EXPECT_DOUBLE_EQ(analysis->steps[0].compute_ms, 0.25);  // aten::mm 200 + aten::add_ 50 µs
  EXPECT_DOUBLE_EQ(analysis->steps[0].idle_ms, 0.75);
  EXPECT_NE(Find(*analysis, "MmBackward0"), nullptr);  // the op table still lists the wrappers
}

TEST(TraceAnalysisTest, RangesOutlivingTheirParentRunBesideTheStep) {
  const nlohmann::json trace = {
      {"traceEvents", nlohmann::json::array({
                          Event("ProfilerStep#1", "user_annotation", 0, 1000),
                          Event("comm:send", "user_annotation", 100, 10),
                          Event("gloo:send", "cpu_op", 105, 500),
                          Event("forward", "user_annotation", 150, 250),
                          Event("aten::mm", "cpu_op", 200, 100, 1, "[[4, 8], [8, 16]]"),
                      })}};
  absl::StatusOr<TraceAnalysis> analysis = AnalyzeTrace(trace, "pp.json");
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  const OpStats* send = Find(*analysis, "gloo:send");
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(send->place, OpPlace::kOtherThread);
  EXPECT_DOUBLE_EQ(send->self_ms, 0.5);
  EXPECT_FALSE(analysis->InStepTime(*send));
  EXPECT_DOUBLE_EQ(Find(*analysis, "comm:send")->self_ms, 0.01);
  EXPECT_DOUBLE_EQ(Find(*analysis, "forward")->self_ms, 0.15);
  EXPECT_DOUBLE_EQ(Find(*analysis, "aten::mm")->self_ms, 0.1);
  EXPECT_EQ(Find(*analysis, "aten::mm")->place, OpPlace::kStepThread);
}

TEST(TraceAnalysisTest, GpuTracesSplitByKernels) {
  nlohmann::json events = nlohmann::json::array({
      Event("ProfilerStep#1", "user_annotation", 0, 1000),
      Event("aten::mm", "cpu_op", 10, 20),
      Event("sm90_gemm", "kernel", 100, 200, 7),
      Event("ncclDevKernel_AllReduce_Sum_f32", "kernel", 250, 250, 8),
      Event("Memcpy DtoH", "gpu_memcpy", 600, 100, 7),
      // Kineto's device-side copies of the host ranges: no second step, no work.
      Event("ProfilerStep#1", "gpu_user_annotation", 100, 600, 7),
      Event("forward", "gpu_user_annotation", 100, 200, 7),
  });
  absl::StatusOr<TraceAnalysis> analysis = AnalyzeTrace({{"traceEvents", events}}, "gpu.json");
  ASSERT_TRUE(analysis.ok()) << analysis.status();
  EXPECT_TRUE(analysis->device_timeline);
  ASSERT_EQ(analysis->steps.size(), 1u);
  // Kernels busy [100, 300) and [600, 700); NCCL alone [300, 500).
  EXPECT_DOUBLE_EQ(analysis->steps[0].compute_ms, 0.3);
  EXPECT_DOUBLE_EQ(analysis->steps[0].exposed_comm_ms, 0.2);
  EXPECT_DOUBLE_EQ(analysis->steps[0].idle_ms, 0.5);
  const OpStats* nccl = Find(*analysis, "ncclDevKernel_AllReduce_Sum_f32");
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->place, OpPlace::kDevice);
  EXPECT_TRUE(analysis->InStepTime(*nccl));
  EXPECT_FALSE(analysis->InStepTime(*Find(*analysis, "aten::mm")));
  EXPECT_DOUBLE_EQ(nccl->self_ms, 0.25);
  EXPECT_EQ(Find(*analysis, "forward"), nullptr);
}

TEST(TraceAnalysisTest, FlopsOfMatrixProductsAndAttention) {
  auto dims = [](const char* text) { return nlohmann::json::parse(text); };
  EXPECT_EQ(OpFlops("aten::mm", dims("[[4, 8], [8, 16]]")), 2.0 * 4 * 8 * 16);
  EXPECT_EQ(OpFlops("aten::addmm", dims("[[16], [4, 8], [8, 16], [], []]")), 2.0 * 4 * 8 * 16);
  EXPECT_EQ(OpFlops("aten::bmm", dims("[[3, 4, 8], [3, 8, 16]]")), 2.0 * 3 * 4 * 8 * 16);
  EXPECT_EQ(OpFlops("aten::baddbmm", dims("[[3, 4, 16], [3, 4, 8], [3, 8, 16], [], []]")),
            2.0 * 3 * 4 * 8 * 16);
  // Attention over [b=2, h=4, s=16, d=8]: QK^T and PV forward, five products backward.
  const char* qkv = "[[2, 4, 16, 8], [2, 4, 16, 8], [2, 4, 16, 8], [], []]";
  EXPECT_EQ(OpFlops("aten::_scaled_dot_product_flash_attention_for_cpu", dims(qkv)),
            2 * (2.0 * 2 * 4 * 16 * 16 * 8));
  EXPECT_EQ(OpFlops("aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                    dims("[[2, 4, 16, 8], [2, 4, 16, 8], [2, 4, 16, 8], [2, 4, 16, 8]]")),
            5 * (2.0 * 2 * 4 * 16 * 16 * 8));
  EXPECT_EQ(OpFlops("aten::mul", dims("[[4, 8], [4, 8]]")), 0);
  EXPECT_EQ(OpFlops("aten::mm", dims("[[4, 8]]")), 0);  // shapes that do not fit
  EXPECT_EQ(OpFlops("aten::mm", dims("[]")), 0);
}

TEST(TraceAnalysisTest, ErrorsNameTheTrace) {
  EXPECT_EQ(AnalyzeTrace(nlohmann::json::array(), "a.json").status().message(),
            "a.json: no traceEvents array");
  nlohmann::json no_steps = {
      {"traceEvents", nlohmann::json::array({Event("aten::mm", "cpu_op", 0, 1)})}};
  EXPECT_EQ(AnalyzeTrace(no_steps, "b.json").status().message(), "b.json: no ProfilerStep# range");
  EXPECT_THAT(AnalyzeTraceFile("/nonexistent/t.json").status().message(),
              HasSubstr("/nonexistent/t.json"));
}

}  // namespace
}  // namespace titan
