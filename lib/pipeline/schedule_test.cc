#include "lib/pipeline/schedule.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/pipeline/schedule_check.h"

namespace titan {
namespace {

int Loop2(int stage) { return stage % 2; }

PipelineSchedule Csv(const std::string& text) {
  absl::StatusOr<PipelineSchedule> schedule = ParseScheduleCsv(text);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.value_or(PipelineSchedule());
}

TEST(ScheduleTest, ActionsReadAndWriteAsPyTorchSpellsThem) {
  absl::StatusOr<PipelineAction> action = ParseAction(" 12W3 ");
  ASSERT_TRUE(action.ok()) << action.status();
  EXPECT_EQ(action->op, PipelineOp::kBackwardWeight);
  EXPECT_EQ(action->stage, 12);
  EXPECT_EQ(action->microbatch, 3);
  EXPECT_EQ(ActionName(*action), "12W3");
  for (const char* bad : {"F0", "1X0", "1F", "1SEND_F0", ""}) EXPECT_FALSE(ParseAction(bad).ok()) << bad;
}

TEST(ScheduleTest, NamesAreCaseInsensitiveAndUnknownOnesListTheChoices) {
  absl::StatusOr<ScheduleKind> kind = FindScheduleKind("zbvzerobubble");
  ASSERT_TRUE(kind.ok());
  EXPECT_EQ(kind->name, "ZBVZeroBubble");
  EXPECT_EQ(kind->placement, StagePlacement::kV);
  const absl::Status unknown = FindScheduleKind("Chimera").status();
  EXPECT_NE(std::string(unknown.message()).find("DualPipeV"), std::string::npos) << unknown;
}

TEST(ScheduleTest, VPlacementPutsTheFirstAndLastStageOnRankZero) {
  EXPECT_EQ(RankOfStage(StagePlacement::kV, 4, 2, 0), 0);
  EXPECT_EQ(RankOfStage(StagePlacement::kV, 4, 2, 7), 0);
  EXPECT_EQ(RankOfStage(StagePlacement::kV, 4, 2, 4), 3);
  EXPECT_EQ(RankOfStage(StagePlacement::kLoop, 4, 2, 6), 2);
}

TEST(ScheduleTest, OneFOneBWarmsUpByDistanceFromTheLastStage) {
  absl::StatusOr<PipelineSchedule> schedule = BuildSchedule(*FindScheduleKind("1F1B"), 2, 1, 3);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_EQ(ScheduleToCsv(*schedule), "0F0,0F1,0B0,0F2,0B1,0B2\n1F0,1B0,1F1,1B1,1F2,1B2\n");
  EXPECT_FALSE(BuildSchedule(*FindScheduleKind("1F1B"), 4, 1, 3).ok());  // fewer than stages
  EXPECT_FALSE(BuildSchedule(*FindScheduleKind("GPipe"), 2, 2, 4).ok());
  EXPECT_FALSE(BuildSchedule(*FindScheduleKind("ZBVZeroBubble"), 2, 3, 4).ok());
}

// Blank lines name no rank but count as lines: the error points at the file's own line.
TEST(ScheduleTest, CsvErrorNamesTheFilesLineAfterBlankLines) {
  const absl::Status bad = ParseScheduleCsv("\n\n0F0,0F1,0B0,0B1\n1F0,1B0,1Z1,1B1\n").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(bad.message()).rfind("line 4 (rank 1): ", 0), 0u) << bad;
}

TEST(ScheduleTest, TableShowsEachRanksActionsByTimeStep) {
  absl::StatusOr<ScheduleTimeline> timeline =
      SimulateSchedule(Csv("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"), 2, 2, Loop2);
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  EXPECT_EQ(FormatScheduleTable(*timeline),
            "        Rank 0 Rank 1\n"
            "Step 0: 0F0\n"
            "Step 1: 0F1    1F0\n"
            "Step 2:        1B0\n"
            "Step 3: 0B0    1F1\n"
            "Step 4:        1B1\n"
            "Step 5: 0B1\n");
  // 2 of 6 steps idle on each rank.
  EXPECT_NEAR(timeline->IdleFraction(), 2.0 / 6.0, 1e-12);
}

TEST(ScheduleTest, SimulationRefusesWhatCannotRun) {
  // A backward before its forward's input can arrive from the other rank, both waiting.
  absl::Status deadlock = SimulateSchedule(Csv("0F0,0B0\n1B0,1F0\n"), 2, 1, Loop2).status();
  EXPECT_NE(std::string(deadlock.message()).find("deadlocks"), std::string::npos) << deadlock;
  // W before its I on the same rank never becomes ready.
  EXPECT_FALSE(SimulateSchedule(Csv("0F0,0W0,0I0\n1F0,1B0\n"), 2, 1, Loop2).ok());
  // Stage 1 is rank 1's.
  EXPECT_FALSE(SimulateSchedule(Csv("0F0,1F0,1B0,0B0\n\n"), 2, 1, Loop2).ok());
  // Microbatch 1 never runs backward; stage 0 splits it into I and W, stage 1 runs B twice.
  EXPECT_FALSE(SimulateSchedule(Csv("0F0,0F1,0B0\n1F0,1F1,1B0,1B1\n"), 2, 2, Loop2).ok());
  EXPECT_FALSE(SimulateSchedule(Csv("0F0,0I0,0W0\n1F0,1B0,1B0\n"), 2, 1, Loop2).ok());
  EXPECT_TRUE(SimulateSchedule(Csv("0F0,0I0,0W0\n1F0,1B0\n"), 2, 1, Loop2).ok());
}

TEST(ScheduleTest, BubblesShrinkAsTheoryOrdersTheSchedules) {
  // 4 ranks, 8 microbatches, a backward twice a forward (I and W one each).
  ActionCosts costs;
  costs.backward = 2;
  std::vector<double> idle;
  for (const char* name : {"GPipe", "1F1B", "Interleaved1F1B", "InterleavedZeroBubble",
                           "ZBVZeroBubble"}) {
    const ScheduleKind kind = *FindScheduleKind(name);
    const int per_rank = kind.multi_stage ? 2 : 1;
    absl::StatusOr<PipelineSchedule> schedule = BuildSchedule(kind, 4, per_rank, 8);
    ASSERT_TRUE(schedule.ok()) << schedule.status();
    absl::StatusOr<ScheduleTimeline> timeline = SimulateSchedule(
        *schedule, 4 * per_rank, 8,
        [&](int stage) { return RankOfStage(kind.placement, 4, per_rank, stage); }, costs);
    ASSERT_TRUE(timeline.ok()) << name << ": " << timeline.status();
    idle.push_back(timeline->IdleFraction());
  }
  // (p - 1) / (m + p - 1) for GPipe and 1F1B: 3 / 11.
  EXPECT_NEAR(idle[0], 3.0 / 11.0, 1e-12);
  EXPECT_NEAR(idle[1], 3.0 / 11.0, 1e-12);
  EXPECT_LT(idle[2], idle[1]);
  EXPECT_LT(idle[3], idle[2]);
  EXPECT_LE(idle[4], idle[2]);
}

}  // namespace
}  // namespace titan
