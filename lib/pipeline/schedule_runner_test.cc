#include "lib/pipeline/schedule_runner.h"

#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/pipeline/layout.h"
#include "lib/pipeline/schedule.h"
#include "lib/pipeline/schedule_check.h"

namespace titan {
namespace {

std::string Describe(const PipelineRoundPlan::Round& round) {
  std::string text = absl::StrCat("r", round.index, ":");
  for (const PipelineRoundPlan::Transfer& t : round.transfers) {
    absl::StrAppend(&text, " ", t.send ? "send" : "recv", t.need.grad ? " grad " : " act ",
                    t.need.stage, "/", t.need.microbatch, t.send ? " to " : " from ", t.peer);
  }
  return text;
}

// One stage per rank, 1F1B over 3 microbatches: rank 0's fourth action (0F2) sends in the round
// in which the last stage's 1B1 produces the gradient rank 0 receives, so both go in one batch:
// what NCCL must run as one group.
TEST(PlanRoundsTest, OneFOneBSendsAndReceivesInTheSameBatch) {
  PipelineSplitOptions options;
  options.pp = 2;
  absl::StatusOr<PipelineLayout> layout = PlanPipeline(options, 4);
  ASSERT_TRUE(layout.ok()) << layout.status();
  absl::StatusOr<PipelineSchedule> schedule = BuildSchedule(layout->kind, 2, 1, 3);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  absl::StatusOr<ScheduleTimeline> timeline = PlaySchedule(
      *schedule, layout->num_stages(), 3, [&](int stage) { return layout->RankOfStage(stage); });
  ASSERT_TRUE(timeline.ok()) << timeline.status();
  const PipelineRoundPlan plan = PlanRounds(*layout, *timeline, 0);
  std::vector<std::string> rounds;
  for (const auto& round : plan.rounds) rounds.push_back(Describe(round));
  EXPECT_EQ(rounds,
            (std::vector<std::string>{
                "r0: send act 1/0 to 1", "r1: send act 1/1 to 1", "r2: recv grad 0/0 from 1",
                "r4: send act 1/2 to 1 recv grad 0/1 from 1", "r6: recv grad 0/2 from 1"}));
  EXPECT_EQ(plan.action_rounds, (std::vector<int>{0, 1, 3, 4, 5, 7}));
}

// For every schedule on 2 and 4 ranks: both ends of each transfer list it in the same round (so
// NCCL, matching a pair's operations by order, pairs the right tensors), a batch holds at most one
// transfer per peer and direction, and an action runs in a later round than the batch that
// brings its input.
TEST(PlanRoundsTest, BothEndsAgreeForEverySchedule) {
  int plans = 0;
  for (const char* name : {"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
                           "ZBVZeroBubble", "DualPipeV"}) {
    for (int pp : {2, 4}) {
      for (int microbatches : {pp, 2 * pp}) {
        PipelineSplitOptions options;
        options.schedule = name;
        options.pp = pp;
        absl::StatusOr<PipelineLayout> layout = PlanPipeline(options, 16);
        ASSERT_TRUE(layout.ok()) << name << ": " << layout.status();
        absl::StatusOr<PipelineSchedule> schedule =
            BuildSchedule(layout->kind, pp, layout->stages_per_rank, microbatches);
        if (!schedule.ok()) continue;  // this schedule's constraint on microbatches
        ++plans;
        const std::string label = absl::StrCat(name, " pp ", pp, " mb ", microbatches);
        // (from, to) -> the (round, need) of each transfer, as the sender and as the receiver lists
        // it.
        std::map<std::pair<int, int>, std::vector<std::tuple<int, bool, int, int>>> sent, received;
        absl::StatusOr<ScheduleTimeline> timeline =
            SimulateSchedule(*schedule, layout->num_stages(), microbatches,
                             [&](int stage) { return layout->RankOfStage(stage); });
        ASSERT_TRUE(timeline.ok()) << label << ": " << timeline.status();
        for (int rank = 0; rank < pp; ++rank) {
          const PipelineRoundPlan plan = PlanRounds(*layout, *timeline, rank);
          ASSERT_EQ(plan.actions, (*schedule)[rank]) << label;
          std::map<PipelineNeed, int> arrives;  // round of the batch bringing each input
          for (const auto& round : plan.rounds) {
            std::set<std::pair<bool, int>> directions;
            EXPECT_FALSE(round.transfers.empty()) << label;
            for (const auto& t : round.transfers) {
              EXPECT_TRUE(directions.insert({t.send, t.peer}).second) << label << Describe(round);
              const auto key =
                  std::make_tuple(round.index, t.need.grad, t.need.stage, t.need.microbatch);
              (t.send ? sent[{rank, t.peer}] : received[{t.peer, rank}]).push_back(key);
              if (!t.send) arrives[t.need] = round.index;
            }
          }
          for (size_t k = 0; k < plan.actions.size(); ++k) {
            if (k > 0) {
              EXPECT_LT(plan.action_rounds[k - 1], plan.action_rounds[k]) << label;
            }
            const PipelineAction& a = plan.actions[k];
            const PipelineNeed need{a.op != PipelineOp::kForward, a.stage, a.microbatch};
            auto it = arrives.find(need);
            if (it != arrives.end()) {
              EXPECT_LT(it->second, plan.action_rounds[k]) << label << " " << ActionName(a);
            }
          }
        }
        EXPECT_EQ(sent, received) << label;
      }
    }
  }
  EXPECT_GE(plans, 20);
}

}  // namespace
}  // namespace titan
