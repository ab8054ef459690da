#ifndef TITAN_LIB_TRAIN_TRAINER_H_
#define TITAN_LIB_TRAIN_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/config/job_config.pb.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/profiling/step_profiler.h"
#include "lib/train/components.h"
#include "lib/train/cuda_graph.h"
#include "lib/train/grad_clip.h"
#include "lib/train/head_loss.h"
#include "lib/train/loss.h"
#include "lib/train/resource_monitor.h"
#include "lib/train/step_hooks.h"
#include "lib/train/train_checkpoint.h"
#include "lib/util/folder_lock.h"

namespace titan {

// The model's forward and the loss of one microbatch, summed over its counted tokens: the one
// place training and evaluation run them. Autocast covers the forward when `autocast` is set.
at::Tensor ForwardLossSum(Decoder& model, DataParallel& data_parallel, const Batch& batch,
                          const HeadLoss& loss, std::optional<at::ScalarType> autocast);

// What one optimizer step measured.
struct StepResult {
  // Read from the device only when TrainStep is asked to (a logging step): otherwise 0.
  double loss = 0;       // summed losses / counted tokens, over every microbatch and rank
  double grad_norm = 0;  // before clipping
  double lr = 0;
  int64_t tokens = 0;    // this rank's input tokens
};

// torchtitan's Trainer: Init builds every part (lib/train/components.h) and resumes from the
// newest checkpoint; Train runs the loop (batch, step, log, validate, checkpoint, stop signal).
// Other tools drive TrainStep themselves with batches of their own and a loss of their own.
class Trainer {
 public:
  Trainer(const JobConfig& config, const DistributedRuntime& runtime);
  ~Trainer();

  absl::Status Init();
  // To [training] steps, or to a SIGINT/SIGTERM (after which it saves a checkpoint and returns
  // OK).
  absl::Status Train();

  // One optimizer step over `microbatches` (this rank's): forward, loss, backward on each,
  // gradients reduced over data-parallel ranks, clipped, optimizer and LR step. The loss is
  // normalised by the counted tokens of the whole step over every rank (one all-reduce when
  // `labels_masked`; else every label counts and the count is known).
  // With `read_metrics` false the step neither reads the loss or gradient norm back to the host
  // nor reduces the loss across ranks: no host synchronisation (every rank must pass the same).
  absl::StatusOr<StepResult> TrainStep(const std::vector<Batch>& microbatches, bool labels_masked,
                                       bool read_metrics = true);
  // The next step's microbatches from [training] dataset_path, as Train reads them.
  absl::StatusOr<std::vector<Batch>> NextMicrobatches();

  // The loss TrainStep and validation use (default: the cross-entropy, vocab-parallel on logits
  // that tensor parallelism left as vocabulary shards); a loss set here gets whole logits, so it
  // is refused with [training] loss_chunk_size (which fuses the head and the cross-entropy).
  absl::Status set_loss(LossFn loss);
  StepHooks& hooks() { return hooks_; }
  Decoder& model() { return *model_.model; }  // not with pipeline parallelism: see pipeline()
  PipelineParallel* pipeline() { return model_.pipeline.get(); }  // null without
  const ModelInfo& model_info() const { return model_.info; }
  // As this rank holds them (FSDP: shards); what the optimizer updates.
  const std::vector<ParamRef>& params() const { return model_.params; }
  const Optimizer& optimizer() const { return *optimizer_; }
  const RunSetup& setup() const { return setup_; }
  const TrainState& state() const { return state_; }
  // Logs this rank's parameter and optimizer-state bytes (the tensors held).
  void LogStateMemory() const;

 private:
  // The token-weighted mean loss over every rank's share of validation_batches_ global batches.
  absl::StatusOr<double> Validate();
  // Calls `use` with each of this rank's batches of one evaluation (its data-parallel share of
  // [validation] dataset_path from its start), at most `max_batches` (-1: all); returns how many.
  // `passes`, when given, is set to the passes over the data begun (more than 1: it repeated).
  absl::StatusOr<int64_t> ForEachValidationBatch(
      int64_t max_batches, const std::function<absl::Status(const TokenBatch&)>& use,
      int64_t* passes = nullptr) const;
  // Reads this rank's share of what one evaluation reads, so a missing, empty or malformed file
  // stops the run at startup, and agrees on validation_batches_ (a collective over data-parallel
  // ranks).
  absl::Status CheckValidationData();
  // What shards batches (context parallelism) and picks the loss (tensor parallelism): the model's
  // data-parallel wrapper, or with pipeline parallelism its stages' (alike in both).
  DataParallel& batch_parallel() const;
  // Over the ranks a step's tokens are split across: data parallel × context parallel. `values`
  // (on the host) in place.
  absl::Status SumOverDp(const at::Tensor& values) const;
  absl::StatusOr<double> SumOverDp(double value) const;
  absl::Status InstallHooks();
  // [compile] cuda_graph: refused where it cannot run, else cuda_graph_.
  absl::Status SetUpCudaGraph();
  // An error if a step after the last check, up to `step`, had a non-finite gradient norm: its
  // update made the weights non-finite, which a save would keep (one host read).
  absl::Status CheckFiniteSince(int64_t step);
  // Train's step: a device out-of-memory error becomes a status, after the allocator's history is
  // dumped ([profiling] enable_memory_snapshot: iteration_<last step>_exit/).
  absl::StatusOr<StepResult> TrainStepOrOom(const std::vector<Batch>& microbatches,
                                            bool read_metrics);
  // Reads the loss (reduced over ranks: every rank calls it) and the gradient norm of the last
  // step into `result`: what TrainStep reads when asked, or later for a step it did not.
  absl::Status ReadStepMetrics(StepResult& result);

  const JobConfig config_;
  const DistributedRuntime& runtime_;
  RunSetup setup_;
  FolderLocks folder_locks_;  // held while the run lives
  std::unique_ptr<Tokenizer> tokenizer_;
  ModelBundle model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<WarmupStableDecaySchedule> schedule_;
  std::unique_ptr<TextDataLoader> train_data_;
  std::unique_ptr<TrainCheckpointer> checkpointer_;  // null with checkpointing off
  std::unique_ptr<MetricsLogger> metrics_;           // null on ranks that write none
  std::unique_ptr<StepProfiler> profiler_;           // null with profiling off
  std::unique_ptr<ResourceMonitor> monitor_;         // [job] monitoring_interval
  std::unique_ptr<CudaGraphedMicrobatch> cuda_graph_;  // [compile] cuda_graph; null: eager
  StepHooks hooks_;
  LossFn custom_loss_;  // set_loss's; unset: the cross-entropy
  HeadLoss loss_;       // what the last block's output gets (DataParallel::Loss)
  SquaredNormReducer grad_norm_reducer_;  // sums the gradient norm over ranks; null: one process
  TrainState state_;
  // On the device, true once a step's gradient norm was non-finite; undefined: no step since
  // checked_through_step_.
  at::Tensor nonfinite_grad_norm_;
  int64_t checked_through_step_ = 0;
  // The last step's summed loss and gradient norm on the device, and its counted tokens over every
  // rank, until ReadStepMetrics reads them.
  at::Tensor step_loss_sum_;
  at::Tensor step_grad_norm_;
  double step_counted_ = 0;
  int64_t microbatches_ = 1;
  // Batches every rank runs per evaluation: the longest data-parallel share's ([validation] steps
  // at most), so that the ranks' collectives pair up.
  int64_t validation_batches_ = 0;
  double peak_flops_ = 0;
};

// Trains the job described by `config` to the end (or to a SIGINT/SIGTERM, after which it saves a
// checkpoint and returns OK). The one library call behind titan_train. With several ranks
// (`runtime` connected), every rank calls it: the model is parallelized as [parallelism] says,
// each rank reads its share of every global batch, and rank 0 writes config.toml and metrics.
absl::Status RunTraining(const JobConfig& config,
                         const DistributedRuntime& runtime = DistributedRuntime::SingleProcess());

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_TRAINER_H_
