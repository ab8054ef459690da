#ifndef TITAN_LIB_PIPELINE_SCHEDULE_RUNNER_H_
#define TITAN_LIB_PIPELINE_SCHEDULE_RUNNER_H_

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/distributed/communicator.h"
#include "lib/pipeline/layout.h"
#include "lib/pipeline/schedule.h"
#include "lib/pipeline/schedule_check.h"
#include "lib/pipeline/stage.h"
#include "lib/train/loss.h"

namespace titan {

// What one action needs from another stage: a forward's input or a backward's output gradient.
struct PipelineNeed {
  bool grad = false;
  int stage = 0;  // the stage that needs it
  int microbatch = 0;
  bool operator<(const PipelineNeed& other) const;
};

// One rank's part of a schedule played out with unit costs: each action gets a round (it starts a
// whole number of rounds after what it needs), and each round's transfers to and from other ranks
// form one batch. Both ends of a transfer list it in the same round.
struct PipelineRoundPlan {
  struct Transfer {
    bool send = false;
    PipelineNeed need;
    int peer = 0;  // pipeline rank
  };
  struct Round {
    int index = 0;
    std::vector<Transfer> transfers;
  };
  std::vector<PipelineAction> actions;  // the rank's, in order
  std::vector<int> action_rounds;       // actions[i] runs in round action_rounds[i]
  std::vector<Round> rounds;            // the rank's batches, ascending, none empty
};

// `rank`'s plan of a schedule on `layout`, from its timeline with unit costs (SimulateSchedule's
// or PlaySchedule's).
PipelineRoundPlan PlanRounds(const PipelineLayout& layout, const ScheduleTimeline& timeline,
                             int rank);

// Runs one rank's actions of a pipeline schedule on its stages. A forward takes the previous
// stage's output and a backward the next stage's input gradient: from a local stage directly (V
// placement puts two neighbours on one rank), else point to point over the pipeline group, in
// PlanRounds' batches: a round's batch starts right after the rank's compute of that round (its
// receives earlier when the rank computes nothing then), so transfers overlap compute. Every rank
// issues its batches in round order and both ends list a transfer in the same round, so NCCL,
// which runs a pair's operations in issue order and ignores tags, can neither deadlock nor
// mismatch them; a rank blocks only on what it needs next. Gloo gets one tag for all, so it
// pairs by order too.
class ScheduleRunner {
 public:
  // `stages`: this rank's, by stage index; `comm`: the pipeline group, its rank r running
  // layout.StagesOfRank(r) (null when every stage is local); `timeline`: every rank's actions over
  // `microbatches` microbatches, played out with unit costs; `hidden_dim`: what travels between
  // stages is [batch, seq / sequence_shards, hidden_dim] in `activation_dtype` (sequence
  // parallelism leaves each tensor-parallel rank its slice of the sequence; the dtype is the
  // residual stream's: float32, or FSDP's param_dtype, in which its blocks compute).
  static absl::StatusOr<std::unique_ptr<ScheduleRunner>> Create(
      const PipelineLayout& layout, std::map<int, PipelineStage*> stages, Communicator* comm,
      const ScheduleTimeline& timeline, int microbatches, int64_t hidden_dim,
      int64_t sequence_shards = 1, at::ScalarType activation_dtype = at::kFloat);

  // Runs this rank's actions over `microbatches` (as many as the schedule's). Returns the sum of
  // the last stage's microbatch losses (an fp32 scalar; zero on ranks without the last stage).
  absl::StatusOr<at::Tensor> Run(const std::vector<Batch>& microbatches, const StageRun& run);

  // Time in Run, and the part of it spent waiting for other ranks, since the last call. On a GPU
  // that is the stream's time (from timed events: the host only queues the work, and a receive
  // makes the stream wait, not the host), read once the device has done it; else the host's.
  struct Times {
    double total_seconds = 0;
    double waiting_seconds = 0;
  };
  Times TakeTimes();

 private:
  ScheduleRunner(const PipelineLayout& layout, std::map<int, PipelineStage*> stages,
                 Communicator* comm, int rank, int microbatches, int64_t hidden_dim,
                 int64_t sequence_shards, at::ScalarType activation_dtype, PipelineRoundPlan plan);

  const PipelineLayout& layout_;
  std::map<int, PipelineStage*> stages_;
  Communicator* comm_;
  int microbatches_;
  int64_t hidden_dim_;
  int64_t sequence_shards_;
  at::ScalarType activation_dtype_;
  int rank_;
  // A stretch of the GPU stream's work between two timed events, not read yet.
  struct DeviceSpan {
    c10::Event start;
    c10::Event end;
    bool waiting;  // a wait for other ranks; else a whole Run
  };
  // Adds the spans the device has finished to times_ (all of them, waiting, with `wait`).
  void FoldDeviceSpans(bool wait);

  PipelineRoundPlan plan_;
  Times times_;
  std::deque<DeviceSpan> device_spans_;  // in the stream's order
};

}  // namespace titan

#endif  // TITAN_LIB_PIPELINE_SCHEDULE_RUNNER_H_
