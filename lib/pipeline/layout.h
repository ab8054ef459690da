#ifndef TITAN_LIB_PIPELINE_LAYOUT_H_
#define TITAN_LIB_PIPELINE_LAYOUT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/decoder.h"
#include "lib/pipeline/schedule.h"

namespace titan {

// torchtitan's [parallelism] pipeline keys that decide the stages.
struct PipelineSplitOptions {
  std::string schedule = "1F1B";
  int pp = 1;
  int layers_per_stage = -1;  // -1: unset
  // The embedding and the norm + head count as this many layers when layers are spread.
  int first_stage_less_layers = 1;
  int last_stage_less_layers = 1;
  std::vector<std::string> split_points;  // "layers.N" where a stage begins; empty: spread
};

// Which layers each pipeline stage holds and where the stages run.
struct PipelineLayout {
  ScheduleKind kind;
  int pp = 1;
  int stages_per_rank = 1;
  std::vector<DecoderPart> parts;  // by stage: the first embeds, the last holds norm and head

  int num_stages() const { return static_cast<int>(parts.size()); }
  int RankOfStage(int stage) const;
  std::vector<int> StagesOfRank(int rank) const;  // ascending
};

// torchtitan's split of `n_layers` layers (pipeline_parallel.py): with split points, stages begin
// there; else pp × (1, or 2 for multi-stage schedules) stages, or as many as layers_per_stage
// needs, with the embedding and the head weighing first/last_stage_less_layers layers and the
// layers spread evenly (earlier stages take the remainder). Errors name the keys.
absl::StatusOr<PipelineLayout> PlanPipeline(const PipelineSplitOptions& options, int n_layers);

}  // namespace titan

#endif  // TITAN_LIB_PIPELINE_LAYOUT_H_
