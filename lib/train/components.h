#ifndef TITAN_LIB_TRAIN_COMPONENTS_H_
#define TITAN_LIB_TRAIN_COMPONENTS_H_

// The parts a training tool is assembled from, each built from the job config on its own:
// titan_train's Trainer calls them in order, and titan_rl and profile_run reuse them.

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/config/job_config.pb.h"
#include "lib/data/text_data_loader.h"
#include "lib/metrics/metrics_logger.h"
#include "lib/metrics/step_log.h"
#include "lib/model/decoder.h"
#include "lib/parallel/data_parallel.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/parallel/sharded_state.h"
#include "lib/pipeline/pipeline_parallel.h"
#include "lib/registry/model_spec.h"
#include "lib/tokenizer/tokenizer.h"
#include "lib/train/lr_scheduler.h"
#include "lib/train/optimizer.h"
#include "lib/util/folder_lock.h"

namespace titan {

// Where and how this process computes, and what every rank agreed on at start.
struct RunSetup {
  at::Device device{at::kCPU};
  std::optional<at::ScalarType> autocast_dtype;  // set: mixed precision (GPU only)
  int64_t seed = 0;                              // rank 0's, broadcast
  std::string run_id;                            // names this run's temporary checkpoint dirs
  int dp_rank = 0;
  int dp_size = 1;
  // The checkpoint step folder the run resumes (ChooseStepToResume), set before the model is
  // built: its weights replace the initial load, which is then not read. "": none.
  std::string resume_dir;
};

// [compile] fused_kernels and disabled_kernels, and the optimizer's bf16 weight copies where they
// cost no peak memory (process-wide switches; SetUpRun calls it).
absl::Status ConfigureFusedKernels(const JobConfig& config);

// Creates [job] dump_folder (mkdir -p); an error names the key, as a file in its place.
absl::Status MakeDumpFolder(const JobConfig& config);

// Rank 0 logs [job] description and, with [job] print_config, the effective configuration (TOML):
// every training tool's first lines.
void LogJobStart(const JobConfig& config, const DistributedRuntime& runtime);

// Rank 0 warns when [profiling] is on but the steps after `resumed_step` end no profiling cycle
// (ProfilingWithoutEffectAfterResume): startup judged the cycles from step 1.
void WarnProfilingWithoutEffectAfterResume(const JobConfig& config,
                                           const DistributedRuntime& runtime, int64_t resumed_step);

// Picks the device, splits host cores between local ranks, agrees on seed and run id and seeds
// LibTorch, turns on deterministic algorithms if asked. A collective with several ranks.
absl::StatusOr<RunSetup> SetUpRun(const JobConfig& config, const DistributedRuntime& runtime);

// Locks a training run's folders against a second run writing them (resubmitting a running job
// interleaved metrics and removed its in-flight checkpoint): rank 0 holds [job] dump_folder's
// lock and [checkpoint] folder's (created now, so an unwritable one fails before the first step;
// removed again if the run ends without writing into them), then the other ranks make the dump
// folder. Every rank fails when rank 0 does. A collective with several ranks.
absl::StatusOr<FolderLocks> LockRunFolders(const JobConfig& config,
                                           const DistributedRuntime& runtime);

// Removes from `dump_folder` the temporaries (<file>.tmp.<pid>, WriteFileAtomically's) that runs
// killed mid-write left of the files a run writes there atomically: config.toml, metrics.jsonl,
// titan_rl's rollouts.jsonl and rollouts_rank<r>.jsonl, and rank_<r>/metrics.jsonl; each is
// logged. Only while the folder's lock is held, before any rank writes there (LockRunFolders).
void RemoveInterruptedWrites(const std::string& dump_folder);

// [model] tokenizer_path, or else hf_assets_path, or else the bundled tokenizer.
std::string TokenizerPath(const JobConfig& config);
// Loads TokenizerPath's tokenizer; an error names the key the path came from.
absl::StatusOr<std::unique_ptr<Tokenizer>> BuildTokenizer(const JobConfig& config);

// The model the job trains: its family and shape ([model] name and flavor, or with flavor
// "from_checkpoint" the shape recorded by [model] hf_assets_path's config.json or
// [checkpoint] initial_load_path, or `resume_dir`'s in its place), with the tokenizer's vocabulary
// for flavors that take it and its special tokens.
absl::StatusOr<ModelInfo> ResolveModel(const JobConfig& config, const Tokenizer& tokenizer,
                                       const std::string& resume_dir);

struct ModelBundle {
  ModelInfo info;
  std::unique_ptr<Decoder> model;                // null with pipeline parallelism
  std::unique_ptr<DataParallel> data_parallel;  // null with pipeline parallelism
  std::unique_ptr<PipelineParallel> pipeline;   // [parallelism] pipeline_parallel_degree > 1
  std::vector<ParamRef> params;  // as this rank holds them (FSDP: shards; PP: its stages')
  int64_t num_params = 0;        // of the whole model
  int64_t flops_per_token = 0;   // training, at [training] seq_len
  // How params are held across ranks: the pipeline's stages, else the data-parallel wrapper.
  const ShardedState& sharded() const;
};
// [parallelism] and [activation_checkpoint] as the family's parallelize function takes them (on
// an initialised model: `materialize` unset).
ParallelizeOptions ModelParallelizeOptions(const JobConfig& config, const RunSetup& setup);

// Where [checkpoint] initial_load_path reads from: the path itself, or with initial_load_in_hf
// and no path, [model] hf_assets_path (torchtitan's fallback). Empty: no initial load. The folder
// must exist and hold the format initial_load_in_hf names (false: a titan or Meta checkpoint; of a
// folder holding both an HF and a Meta one, the one it names is read).
absl::StatusOr<std::string> InitialLoadPath(const JobConfig& config);

// The host memory this process may still allocate: physical memory, or less under an
// address-space limit (ulimit -v): what the limit leaves beyond the address space already mapped.
int64_t UsableHostMemoryBytes();

// The key a job's [training] seq_len is set by, which refusals of it name: itself, or the key a
// tool translates into it (titan_rl: "[rl] max_seq_len").
inline constexpr absl::string_view kTrainingSeqLenKey = "[training] seq_len";

// Refuses a [training] seq_len (or enabled [validation] seq_len) whose RoPE tables (the peak of
// computing them on the host in float64) and token batch alone exceed `memory_bytes` (what is
// left: UsableHostMemoryBytes), before anything of that size is allocated; activations come on top
// and are not counted. [training] seq_len is refused as `seq_len_key`.
absl::Status CheckSequencesFitInMemory(const JobConfig& config, const TransformerArgs& args,
                                       int64_t memory_bytes,
                                       absl::string_view seq_len_key = kTrainingSeqLenKey);

// Builds `info`'s model on the meta device, initialises it, applies the family's parallelize
// function ([parallelism], [activation_checkpoint]) and, unless setup.resume_dir is set, loads
// [checkpoint] initial_load_path into the pieces each rank holds. Under FSDP each group is
// initialised after sharding, so no rank holds the whole model. With pipeline parallelism each
// rank builds only its stages (lib/pipeline).
// [training] seq_len's refusals name `seq_len_key`, the key the job set it by.
absl::StatusOr<ModelBundle> BuildModel(const JobConfig& config, const ModelInfo& info,
                                       const RunSetup& setup, const DistributedRuntime& runtime,
                                       absl::string_view seq_len_key = kTrainingSeqLenKey);

// `params` as named tensors sharing their storage (no autograd history): what checkpoints,
// exports and loads read and fill.
NamedTensors DetachedParams(const std::vector<ParamRef>& params);

// [optimizer] over `params`, this rank's. Under pipeline parallelism a param_groups pattern
// must match a parameter on some stage: the stages' ranks sum their groups' counts (a collective
// every rank calls) and refuse alike.
absl::StatusOr<std::unique_ptr<Optimizer>> BuildOptimizer(const JobConfig& config,
                                                          const std::vector<ParamRef>& params,
                                                          const DistributedRuntime& runtime);
absl::StatusOr<WarmupStableDecaySchedule> BuildLrSchedule(const JobConfig& config);

// Microbatches per step: global batch / (local batch × data-parallel degree).
int64_t GradientAccumulationSteps(const JobConfig& config, const RunSetup& setup);

// This rank's share of [training] dataset_path, packed into seq_len windows.
absl::StatusOr<std::unique_ptr<TextDataLoader>> BuildTrainData(const JobConfig& config,
                                                               const Tokenizer* tokenizer,
                                                               const RunSetup& setup);

// This rank's share of [validation] dataset_path from its start, packed into its seq_len windows
// and split across data-parallel ranks as the training data is; ends with the data when
// [validation] steps is -1, else starts over (as the training data does, silently).
absl::StatusOr<std::unique_ptr<TextDataLoader>> BuildValidationData(const JobConfig& config,
                                                                    const Tokenizer* tokenizer,
                                                                    const RunSetup& setup);

// [checkpoint]; null when checkpointing is off. A non-empty `folder` (under [job] dump_folder
// unless absolute) replaces [checkpoint] folder for a companion (RL's critic,
// CriticCheckpointFolder) that keeps `extra_kept` more steps than keep_latest_k.
absl::StatusOr<std::unique_ptr<CheckpointManager>> BuildCheckpointManager(
    const JobConfig& config, const RunSetup& setup, const DistributedRuntime& runtime,
    const std::string& folder = "", int extra_kept = 0);

// metrics.jsonl and TensorBoard; null on ranks that write none. The job's metrics come from rank
// 0, or with pipeline parallelism from the first rank of the last stage (which has the loss);
// [metrics] save_for_all_ranks: every rank, the others under <dump>/rank_<r>/. `start`: how the
// run continues what an earlier run logged there (StepLog); the writer's logger takes the outputs
// no rank writes this time (other ranks', TensorBoard when off) along.
absl::StatusOr<std::unique_ptr<MetricsLogger>> BuildMetrics(const JobConfig& config,
                                                            const DistributedRuntime& runtime,
                                                            const StepLogStart& start);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_COMPONENTS_H_
