#ifndef TITAN_LIB_PIPELINE_SCHEDULE_RUNNER_H_
#define TITAN_LIB_PIPELINE_SCHEDULE_RUNNER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/distributed/communicator.h"
#include "lib/pipeline/layout.h"
#include "lib/pipeline/schedule.h"
#include "lib/pipeline/stage.h"
#include "lib/train/loss.h"

namespace titan {

// Runs one rank's actions of a pipeline schedule on its stages. A forward takes the previous
// stage's output and a backward the next stage's input gradient: from a local stage directly (V
// placement puts two neighbours on one rank), else received point to point over the pipeline
// group, the receive posted one action ahead so the transfer overlaps compute. Results leave by
// asynchronous sends, waited for at the end, so a rank blocks only on what it needs next: a
// schedule that SimulateSchedule accepts cannot deadlock.
class ScheduleRunner {
 public:
  // `stages`: this rank's, by stage index; `comm`: the pipeline group, its rank r running
  // layout.StagesOfRank(r) (null when every stage is local); `hidden_dim`: what travels between
  // stages is [batch, seq / sequence_shards, hidden_dim] in float32 (sequence parallelism leaves
  // each tensor-parallel rank its slice of the sequence).
  ScheduleRunner(const PipelineLayout& layout, std::map<int, PipelineStage*> stages,
                 Communicator* comm, int64_t hidden_dim, int64_t sequence_shards = 1);

  // Runs `actions` over `microbatches`. Returns the sum of the last stage's microbatch losses
  // (an fp32 scalar; zero on ranks without the last stage).
  absl::StatusOr<at::Tensor> Run(const std::vector<PipelineAction>& actions,
                                 const std::vector<Batch>& microbatches, const StageRun& run);

  // Wall time in Run, and the part of it spent waiting for other ranks, since the last call.
  struct Times {
    double total_seconds = 0;
    double waiting_seconds = 0;
  };
  Times TakeTimes();

 private:
  const PipelineLayout& layout_;
  std::map<int, PipelineStage*> stages_;
  Communicator* comm_;
  int64_t hidden_dim_;
  int64_t sequence_shards_;
  int rank_;
  Times times_;
};

}  // namespace titan

#endif  // TITAN_LIB_PIPELINE_SCHEDULE_RUNNER_H_
