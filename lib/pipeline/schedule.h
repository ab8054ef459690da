#ifndef TITAN_LIB_PIPELINE_SCHEDULE_H_
#define TITAN_LIB_PIPELINE_SCHEDULE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// What one rank computes for one stage and microbatch (PyTorch's _ComputationType F, B, I, W).
enum class PipelineOp {
  kForward,         // F: the stage's forward (and, on the last stage, the loss)
  kBackward,        // B: the whole backward: input and weight gradients
  kBackwardInput,   // I: gradients of the stage's input only (what the previous stage waits for)
  kBackwardWeight,  // W: the weight gradients an earlier I left for later
};

struct PipelineAction {
  PipelineOp op = PipelineOp::kForward;
  int stage = 0;
  int microbatch = 0;

  bool operator==(const PipelineAction& other) const {
    return op == other.op && stage == other.stage && microbatch == other.microbatch;
  }
};

// PyTorch's spelling: stage, op letter, microbatch ("2F0", "1W3").
std::string ActionName(const PipelineAction& action);
absl::StatusOr<PipelineAction> ParseAction(absl::string_view text);

// Where a rank's stages sit: "loop" (rank r holds stages r, r + pp, r + 2pp, ...) or "v" (rank r
// holds stages r and 2pp - 1 - r, so the first and last stage share rank 0).
enum class StagePlacement { kLoop, kV };

// A schedule by torchtitan's (PyTorch's) name, case-insensitive: GPipe, 1F1B (one stage per rank),
// Interleaved1F1B, LoopedBFS, InterleavedZeroBubble (several, looped), ZBVZeroBubble, DualPipeV
// (two per rank, V placement).
struct ScheduleKind {
  std::string name;  // as PyTorch spells it
  bool multi_stage = false;
  StagePlacement placement = StagePlacement::kLoop;
};
absl::StatusOr<ScheduleKind> FindScheduleKind(absl::string_view name);

// The compute actions of each rank (index: pipeline rank), in the order it runs them: PyTorch's
// pipeline_order without its padding. Communication is implied: a forward needs the previous
// stage's output, a backward the next stage's input gradient.
using PipelineSchedule = std::vector<std::vector<PipelineAction>>;

// `kind`'s actions for `pp` ranks of `stages_per_rank` stages each and `microbatches` microbatches
// (PyTorch 2.11's order for each schedule; DualPipeV's overlapped F+B pairs run F then B). Errors
// say which constraint the numbers break (1F1B and DualPipeV need as many microbatches as stages,
// interleaved schedules a multiple of their rounds, V schedules two stages per rank).
absl::StatusOr<PipelineSchedule> BuildSchedule(const ScheduleKind& kind, int pp,
                                               int stages_per_rank, int microbatches);

// Which rank runs `stage` of `pp * stages_per_rank`.
int RankOfStage(StagePlacement placement, int pp, int stages_per_rank, int stage);

}  // namespace titan

#endif  // TITAN_LIB_PIPELINE_SCHEDULE_H_
