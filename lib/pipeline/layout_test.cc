#include "lib/pipeline/layout.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

// Each stage's [first, end) layers, with "E" for the embedding and "H" for the head.
std::vector<std::string> Describe(const PipelineLayout& layout) {
  std::vector<std::string> out;
  for (const DecoderPart& part : layout.parts) {
    out.push_back((part.embedding ? "E" : "") + std::to_string(part.first_layer) + "-" +
                  std::to_string(part.end_layer) + (part.head ? "H" : ""));
  }
  return out;
}

PipelineLayout Plan(const PipelineSplitOptions& options, int n_layers) {
  absl::StatusOr<PipelineLayout> layout = PlanPipeline(options, n_layers);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return layout.value_or(PipelineLayout());
}

TEST(LayoutTest, SpreadsLayersWithEmbeddingAndHeadWeighingOneLayerEach) {
  // torchtitan: 6 layers + 1 + 1 over 2 stages = 4 each: 3 layers with the embedding, 3 with the
  // head.
  PipelineSplitOptions options;
  options.pp = 2;
  EXPECT_EQ(Describe(Plan(options, 6)), (std::vector<std::string>{"E0-3", "3-6H"}));
  // Interleaved: 2 stages per rank, 8 effective layers over 4 stages.
  options.schedule = "Interleaved1F1B";
  const PipelineLayout looped = Plan(options, 6);
  EXPECT_EQ(Describe(looped), (std::vector<std::string>{"E0-1", "1-3", "3-5", "5-6H"}));
  EXPECT_EQ(looped.StagesOfRank(1), (std::vector<int>{1, 3}));
  // 10 effective layers over 4 stages: the first two take the remainder.
  options.first_stage_less_layers = 2;
  options.last_stage_less_layers = 2;
  EXPECT_EQ(Describe(Plan(options, 6)), (std::vector<std::string>{"E0-1", "1-4", "4-6", "6-6H"}));
}

TEST(LayoutTest, VSchedulesPairTheFirstAndLastStage) {
  PipelineSplitOptions options;
  options.pp = 2;
  options.schedule = "ZBVZeroBubble";
  const PipelineLayout layout = Plan(options, 6);
  EXPECT_EQ(layout.StagesOfRank(0), (std::vector<int>{0, 3}));
  EXPECT_EQ(layout.StagesOfRank(1), (std::vector<int>{1, 2}));
}

TEST(LayoutTest, AnUnknownScheduleNamesItsKey) {
  PipelineSplitOptions options;
  options.pp = 2;
  options.schedule = "Chimera";
  const absl::Status status = PlanPipeline(options, 4).status();
  EXPECT_TRUE(absl::StartsWith(status.message(),
                               "[parallelism] pipeline_parallel_schedule: unknown schedule "
                               "\"Chimera\"; expected GPipe, "))
      << status;
}

TEST(LayoutTest, LayersPerStageDecidesTheNumberOfStages) {
  PipelineSplitOptions options;
  options.pp = 2;
  options.schedule = "Interleaved1F1B";
  options.layers_per_stage = 2;  // ceil((6 + 2) / 2) = 4 stages, 2 per rank
  EXPECT_EQ(Plan(options, 6).stages_per_rank, 2);
  options.layers_per_stage = 4;  // 2 stages: one per rank, too few for an interleaved schedule
  EXPECT_FALSE(PlanPipeline(options, 6).ok());
  options.schedule = "1F1B";
  EXPECT_EQ(Plan(options, 6).stages_per_rank, 1);
  options.layers_per_stage = 3;  // 3 stages do not divide among 2 ranks
  EXPECT_FALSE(PlanPipeline(options, 6).ok());
}

TEST(LayoutTest, SplitPointsNameWhereStagesBegin) {
  PipelineSplitOptions options;
  options.pp = 2;
  options.split_points = {"layers.2"};
  EXPECT_EQ(Describe(Plan(options, 6)), (std::vector<std::string>{"E0-2", "2-6H"}));
  for (const char* bad : {"layers.0", "layers.6", "layer.2", "layers.x"}) {
    options.split_points = {bad};
    EXPECT_FALSE(PlanPipeline(options, 6).ok()) << bad;
  }
  options.split_points = {"layers.2"};
  options.layers_per_stage = 2;
  EXPECT_FALSE(PlanPipeline(options, 6).ok());
}

}  // namespace
}  // namespace titan
