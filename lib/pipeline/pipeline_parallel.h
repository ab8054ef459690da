#ifndef TITAN_LIB_PIPELINE_PIPELINE_PARALLEL_H_
#define TITAN_LIB_PIPELINE_PIPELINE_PARALLEL_H_

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/distributed/mesh_communicators.h"
#include "lib/distributed/parallel_dims.h"
#include "lib/parallel/parallelize.h"
#include "lib/parallel/sharded_state.h"
#include "lib/pipeline/layout.h"
#include "lib/pipeline/schedule.h"
#include "lib/pipeline/schedule_runner.h"
#include "lib/pipeline/stage.h"
#include "lib/registry/model_spec.h"
#include "lib/train/grad_clip.h"
#include "lib/train/head_loss.h"
#include "lib/train/loss.h"
#include "lib/train/step_hooks.h"

namespace titan {

// How the model is pipelined: torchtitan's [parallelism] pipeline keys.
struct PipelineOptions {
  PipelineSplitOptions split;
  int microbatches = 1;      // per schedule run: local batch / pipeline_parallel_microbatch_size
  std::string schedule_csv;  // pipeline_parallel_schedule_csv: a file; empty: the named schedule
  ParallelizeOptions parallelize;
  at::TensorOptions param_options;  // where and in which dtype the parameters live
  // Set: the model converters (float8) for each stage, run before it is parallelized.
  std::function<absl::Status(Decoder& part)> convert;
};

// Pipeline parallelism (torchtitan's pipeline_llm and PipelineSchedule): the model split into
// stages, this rank's stages built as decoder parts (global parameter names and initialisation,
// so every layout's checkpoints load into every other) and each parallelized over its
// data-parallel group; one training step runs the schedule over the local batch's microbatches.
//
// A tied output head reads the embedding, which the first stage owns: the last stage holds a copy
// whose gradient is added to the owner's after backward and whose value follows the owner's after
// each optimizer step (params() leaves it out: it is neither optimized nor saved).
class PipelineParallel : public ShardedState {
 public:
  // Builds this rank's stages of `spec`'s model (`args`), initialised in the one-process order of
  // random draws (other stages' draws are made and dropped); `comms` null only with one rank.
  static absl::StatusOr<std::unique_ptr<PipelineParallel>> Create(
      const ModelSpec& spec, const TransformerArgs& args, const PipelineOptions& options,
      const ParallelDims& dims, const MeshCommunicators* comms, int rank);
  ~PipelineParallel() override;

  // The parameters this rank trains (its stages', tied copies left out), as held (FSDP: shards).
  const std::vector<ParamRef>& params() const { return params_; }
  const PipelineLayout& layout() const { return layout_; }
  // The training schedule, every rank's actions, and its table (rank × time step, unit costs).
  const PipelineSchedule& schedule() const { return schedule_; }
  std::string ScheduleTable() const;

  // Forward and backward of one local batch (one gradient-accumulation step), split into
  // options.microbatches microbatches and run through the schedule; the last stage
  // backpropagates loss / loss_scale. Returns the summed loss of the microbatches on the last
  // stage's ranks (zero elsewhere).
  absl::StatusOr<at::Tensor> TrainStep(const Batch& batch, const HeadLoss& loss, double loss_scale,
                                       std::optional<at::ScalarType> autocast);
  // After the step's last TrainStep: data-parallel reductions of every stage, the tied copy's
  // gradient added to the embedding's.
  absl::Status FinishBackward();
  // The loss sum of `batch` (forward only, one microbatch) on the last stage's ranks (zero
  // elsewhere: FromLastStage shares it), on the device.
  absl::StatusOr<at::Tensor> EvalLossSum(const Batch& batch, const HeadLoss& loss,
                                         std::optional<at::ScalarType> autocast);
  // `value` as the last stage's ranks have it, on every rank of the pipeline group.
  absl::StatusOr<double> FromLastStage(double value) const;
  // ComputeGradClip's reduction for params(): over each stage's shards and tensor-parallel ranks,
  // then the stages.
  SquaredNormReducer GradNormReducer() const;
  // The data-parallel wrapper of this rank's first stage: every stage shards batches (context
  // parallelism) and picks the loss (tensor parallelism) alike.
  DataParallel& data_parallel() const;
  // DataParallel::PrecomputeFloat8Scales for every stage of this rank.
  absl::Status PrecomputeFloat8Scales() const;
  // The tied head's copy takes the embedding's value (after initialisation, loading, each step).
  absl::Status SyncTiedCopies();
  // Step hooks: the tied copy after the optimizer; each logged step, how long this rank waited
  // for other stages while the schedule ran (the pipeline's bubble, measured).
  void InstallHooks(StepHooks& hooks);

  // ShardedState: each stage's data-parallel pieces; GatherFull brings the whole model to the
  // rank whose every mesh coordinate is 0 (others' sinks get their stages'), a tensor at a time.
  absl::Status GatherFull(const NamedTensors& local, const WholeTensorSink& sink) const override;
  NamedTensors CheckpointPieces(const NamedTensors& local, TensorBoxes& boxes) const override;
  bool WritesPiece(const std::string& name) const override;

 private:
  PipelineParallel(const ModelSpec& spec, const TransformerArgs& args, PipelineLayout layout,
                   const ParallelDims& dims, const MeshCommunicators* comms, int rank);

  absl::Status BuildStages(const PipelineOptions& options);
  // On the gathering group's first rank: the other stages' whole tensors, each received and
  // handed to `sink` in turn; fails unless every parameter was then `seen`.
  absl::Status ReceiveStages(const at::TensorOptions& options,
                             absl::flat_hash_set<std::string>& seen,
                             const WholeTensorSink& sink) const;
  Communicator* pp_comm() const;

  const ModelSpec& spec_;
  const TransformerArgs args_;
  const PipelineLayout layout_;
  const ParallelDims& dims_;
  const MeshCommunicators* comms_;
  const int rank_;     // in the job
  const int pp_rank_;  // in the pipeline group
  int microbatches_ = 1;
  PipelineSchedule schedule_;
  std::vector<std::unique_ptr<PipelineStage>> stages_;  // this rank's, ascending
  std::unique_ptr<ScheduleRunner> runner_;
  std::unique_ptr<ScheduleRunner> eval_runner_;  // validation's waits are not the schedule's
  std::vector<ParamRef> params_;             // stage after stage
  std::vector<size_t> stage_param_counts_;  // how many of params_ each of stages_ holds
  at::Tensor* tied_owner_ = nullptr;  // the first stage's embedding, when tied and local
  at::Tensor* tied_copy_ = nullptr;   // the last stage's copy of it, when tied and local
};

}  // namespace titan

#endif  // TITAN_LIB_PIPELINE_PIPELINE_PARALLEL_H_
