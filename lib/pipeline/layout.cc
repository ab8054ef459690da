#include "lib/pipeline/layout.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/util/status_context.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

constexpr char kKeys[] = "[parallelism] ";

// Layer ranges of `num_stages` stages from torchtitan's weighting (_generate_llm_fqn_per_model_part).
absl::StatusOr<std::vector<DecoderPart>> SpreadLayers(int num_stages, int n_layers,
                                                      int input_weight, int output_weight) {
  if (num_stages == 1) return std::vector<DecoderPart>{DecoderPart{0, n_layers, true, true}};
  const int effective = n_layers + input_weight + output_weight;
  const int per_stage = effective / num_stages;
  const int extra = effective % num_stages;
  const std::string counts = absl::StrCat(n_layers, " layers + pipeline_parallel_first_stage_less_layers=",
                                          input_weight, " + pipeline_parallel_last_stage_less_layers=",
                                          output_weight, " over ", num_stages, " stages");
  if (per_stage == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kKeys, counts, ": some stage would hold nothing"));
  }
  if (input_weight > per_stage || output_weight > per_stage) {
    return absl::InvalidArgumentError(absl::StrCat(
        kKeys, counts, ": the first or last stage's weight exceeds the ", per_stage,
        " layers a stage holds"));
  }
  std::vector<DecoderPart> parts;
  int layer = 0;
  for (int s = 0; s < num_stages; ++s) {
    int take = per_stage + (s < extra ? 1 : 0);
    if (s == 0) take -= input_weight;
    if (s == num_stages - 1) take -= output_weight;
    const int end = std::min(n_layers, layer + take);
    parts.push_back({layer, end, s == 0, s == num_stages - 1});
    layer = end;
  }
  return parts;
}

absl::StatusOr<std::vector<DecoderPart>> PartsFromSplitPoints(
    const std::vector<std::string>& split_points, int n_layers) {
  std::vector<DecoderPart> parts;
  int begin = 0;
  for (const std::string& point : split_points) {
    int layer = -1;
    if (!absl::StartsWith(point, "layers.") ||
        !absl::SimpleAtoi(point.substr(7), &layer) || layer <= begin || layer >= n_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          kKeys, "pipeline_parallel_split_points: \"", point,
          "\": expected layers.N, increasing, with 0 < N < ", n_layers, " (the model's layers)"));
    }
    parts.push_back({begin, layer, begin == 0, false});
    begin = layer;
  }
  parts.push_back({begin, n_layers, begin == 0, true});
  return parts;
}

}  // namespace

int PipelineLayout::RankOfStage(int stage) const {
  return titan::RankOfStage(kind.placement, pp, stages_per_rank, stage);
}

std::vector<int> PipelineLayout::StagesOfRank(int rank) const {
  std::vector<int> stages;
  for (int s = 0; s < num_stages(); ++s) {
    if (RankOfStage(s) == rank) stages.push_back(s);
  }
  return stages;
}

absl::StatusOr<PipelineLayout> PlanPipeline(const PipelineSplitOptions& options, int n_layers) {
  PipelineLayout layout;
  absl::StatusOr<ScheduleKind> kind = FindScheduleKind(options.schedule);
  if (!kind.ok()) return WithContext(kind.status(), "[parallelism] pipeline_parallel_schedule");
  layout.kind = *kind;
  layout.pp = options.pp;
  const std::string schedule =
      absl::StrCat("pipeline_parallel_schedule=", layout.kind.name, " ",
                   layout.kind.multi_stage ? "runs several stages per rank"
                                           : "runs one stage per rank");
  int num_stages = 0;
  if (!options.split_points.empty()) {
    if (options.layers_per_stage > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          kKeys, "pipeline_parallel_split_points and pipeline_parallel_layers_per_stage both set; "
                 "set one"));
    }
    TITAN_ASSIGN_OR_RETURN(layout.parts, PartsFromSplitPoints(options.split_points, n_layers));
    num_stages = layout.num_stages();
  } else if (options.layers_per_stage > 0) {
    const int weighted =
        n_layers + options.first_stage_less_layers + options.last_stage_less_layers;
    num_stages = (weighted + options.layers_per_stage - 1) / options.layers_per_stage;
  } else {
    num_stages = options.pp * (layout.kind.multi_stage ? 2 : 1);
  }
  const std::string stages =
      absl::StrCat(num_stages, " stages (", n_layers, " layers) on pipeline_parallel_degree=",
                   options.pp, " ranks");
  if (num_stages % options.pp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kKeys, stages, ": the stages must divide evenly among the ranks"));
  }
  layout.stages_per_rank = num_stages / options.pp;
  if ((layout.stages_per_rank == 1) == layout.kind.multi_stage ||
      (layout.kind.placement == StagePlacement::kV && layout.stages_per_rank != 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kKeys, stages, " is ", layout.stages_per_rank, " per rank, but ", schedule,
        layout.kind.placement == StagePlacement::kV ? " (exactly two)" : ""));
  }
  if (layout.parts.empty()) {
    TITAN_ASSIGN_OR_RETURN(layout.parts,
                           SpreadLayers(num_stages, n_layers, options.first_stage_less_layers,
                                        options.last_stage_less_layers));
  }
  return layout;
}

}  // namespace titan
