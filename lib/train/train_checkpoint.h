#ifndef TITAN_LIB_TRAIN_TRAIN_CHECKPOINT_H_
#define TITAN_LIB_TRAIN_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lib/checkpoint/async_checkpoint_saver.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/checkpoint_step.h"
#include "lib/config/job_config.pb.h"
#include "lib/data/text_data_loader.h"
#include "lib/metrics/metrics_logger.h"
#include "lib/metrics/step_log.h"
#include "lib/model/module.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/parallel/sharded_state.h"
#include "lib/registry/model_spec.h"
#include "lib/train/components.h"
#include "lib/train/optimizer.h"
#include "nlohmann/json.hpp"

namespace titan {

// Progress that a checkpoint carries besides tensors (torchtitan's train_state and LR scheduler).
struct TrainState {
  int64_t step = 0;          // completed optimizer steps
  int64_t ntokens_seen = 0;  // over all ranks
  int64_t lr_step = 0;       // the schedule's position (equals step unless only its state was
                             // excluded from loading)
};

// The stateful parts a training checkpoint holds; the trainer owns them.
// An error (every rank agreeing) if a weight of any rank's `params` is NaN or inf, or past the
// range of `saved_as` (the type it is written in, which would turn it into inf; the message names
// the tensor): an update can overflow with a finite gradient norm (a huge lr times weight_decay),
// and such weights must not be written. `where` starts the message ("step 3").
absl::Status RefuseNonFiniteWeights(const std::vector<ParamRef>& params,
                                    const DistributedRuntime& runtime, absl::string_view where,
                                    at::ScalarType saved_as = at::kFloat);

// Rank 0 tidies up after an interrupted run (CheckpointManager::RecoverInterruptedRuns); the
// others wait for it.
absl::Status RecoverInterruptedRunsOf(const CheckpointManager& manager,
                                      const DistributedRuntime& runtime);

// The step a resume loads, chosen once before the model is built (ChooseStepToResume) and
// loaded by TrainCheckpointer::Resume.
struct ResumeChoice {
  int64_t step = -1;  // -1: none
  // Its folder ("": none): the run's weights come from it, so [checkpoint] initial_load_path is
  // not read (torchtitan's rule too).
  std::string dir;
  // load_step's manifest, opened to refuse a missing step before the model is built; null: none.
  std::unique_ptr<CheckpointStep> manifest;
};

// [checkpoint] load_step, else the newest step of `manager`'s run, once interrupted restarts are
// undone (every rank agreeing; not with `read_only`).
absl::StatusOr<ResumeChoice> ChooseStepToResume(const JobConfig& config,
                                                const DistributedRuntime& runtime,
                                                const CheckpointManager& manager, bool read_only);

// With [training] seed = -1 and a step to resume: setup.seed becomes the seed the run that saved
// `chosen` drew (recorded with its steps; LibTorch is reseeded and the seed logged), so what the
// seed decides (titan_rl's frozen KL reference and prompt order) stays the saved run's. A step
// that records none keeps the newly drawn seed, with a warning. Call before the model is built.
absl::Status AdoptRecordedSeed(const JobConfig& config, ResumeChoice& chosen, RunSetup& setup);

struct CheckpointedParts {
  const std::vector<ParamRef>* params = nullptr;
  Optimizer* optimizer = nullptr;
  const ShardedState* sharded = nullptr;  // DataParallel, or PipelineParallel
  TextDataLoader* data = nullptr;  // null: a tool without a data loader
  const ModelInfo* model = nullptr;
  int64_t num_params = 0;  // of the whole model: what the final export writes
  // What kind of run saves these steps ("train", "rl/grpo", ...): a resume refuses another
  // kind's steps, whose progress and state mean something else.
  std::string run_kind = "train";
  // A tool that only reads the run's steps (titan_rl --generate, --step_rollouts): Resume changes
  // nothing in the folder, which belongs to a training run (it sets no step aside, however it
  // chooses one, and leaves an interrupted run's journal to that run).
  bool read_only = false;
  // With read_only, for a tool that needs the weights alone (--generate): a model-only step (the
  // run's last_save_model_only export) loads at any step.
  bool weights_only = false;
  // The run's seed (RunSetup::seed), recorded with each step for AdoptRecordedSeed; -1: none.
  int64_t seed = -1;
};

// Saving and resuming a training run under [checkpoint]: every rank writes its own pieces (FSDP
// shards) at once, loads reshard to any layout, async_mode writes in the background,
// last_save_in_hf exports the final weights, exclude_from_loading leaves chosen state fresh.
class TrainCheckpointer {
 public:
  // `manager` is the run's checkpoint folder; `config` has passed ValidateJobConfig.
  static absl::StatusOr<std::unique_ptr<TrainCheckpointer>> Create(
      const JobConfig& config, const DistributedRuntime& runtime,
      std::unique_ptr<CheckpointManager> manager, CheckpointedParts parts);
  ~TrainCheckpointer();

  // Loads `chosen` (ChooseStepToResume of this folder) into the parts and `state`; OK without
  // doing anything when the folder holds none. A model-only checkpoint loads only at step 0 (a
  // seed checkpoint, as torchtitan) or at or past [training] steps (a finished run's final save,
  // which leaves nothing to train; not with train_state excluded); other ones are exports,
  // refused with what to do instead. A
  // load_step before the newest step sets the newer ones aside (CheckpointManager::
  // SetAsideStepsAfter), so that a later resume continues this run (not with parts.read_only).
  // With `paired` (PPO's critic, saved before each policy step): only a step that `paired` also
  // holds; load_step without one is an error naming the missing folder, and the newest step
  // without one (a save interrupted between the two) is set aside, with a warning, for the newest
  // step both hold. Call paired->ResumeAt(loaded_step()) next.
  absl::Status Resume(TrainState& state, ResumeChoice chosen,
                      const TrainCheckpointer* paired = nullptr);
  // Loads exactly `step` (-1: none; a step 0 that is absent: none, as beside a seed checkpoint)
  // and sets aside the steps after it, which belong to steps the run redoes. Only after the
  // Resume this checkpointer was `paired` to, which recovered its interrupted runs.
  absl::Status ResumeAt(int64_t step, TrainState& state);
  // The step folder Resume or ResumeAt loaded; -1: none.
  int64_t loaded_step() const { return loaded_step_; }
  // Call on every rank once Resume (or ResumeAt) returned: a collective. Rank 0 deletes the steps
  // beyond keep_latest_k that saves killed before their cleanup left (never the loaded step, by
  // then the newest: Resume set the newer ones aside, or refused a load_step with nothing to
  // train); not with parts.read_only, nor while this run's first save is yet to set the steps
  // aside (train_state excluded, with steps to train: with none, no save comes, and they are
  // trimmed).
  absl::Status EnforceKeepLatest() const;
  // Saves `state` and the parts at state.step; model_only: the consolidated final weights (in
  // export_dtype, and as Hugging Face files with last_save_in_hf). With async_mode=async the
  // write happens in the background; every rank agrees on the outcome before the next save.
  absl::Status Save(const TrainState& state, bool model_only);
  // The step the run continues from once Resume loaded a full step (0 with train_state excluded);
  // -1: it starts fresh.
  int64_t resumed_step() const { return resumed_step_; }
  // The step folder Resume loaded weights from (a seed checkpoint's too); "": none.
  const std::string& loaded_dir() const { return loaded_dir_; }
  // Whether loaded_dir() holds model weights only (a seed checkpoint, a finished run's export).
  bool loaded_model_only() const { return loaded_model_only_; }
  // The folder of committed step `step`.
  std::string StepDirectory(int64_t step) const { return manager_->StepDirectory(step); }
  // True from a Resume that counts from step 0 again over the loaded run's steps until the first
  // save sets them aside; each `on_set_aside` runs once that save is committed, in the order added
  // (the per-step logs follow: MetricsLogger::CommitRestart, StepLog::Commit).
  bool restart_pending() const { return set_aside_at_first_save_ || restart_saving_; }
  void OnSetAside(std::function<absl::Status()> on_set_aside) {
    on_set_aside_.push_back(std::move(on_set_aside));
  }
  // Waits for a background save and agrees with the other ranks that it succeeded.
  absl::Status FinishPendingSave();

 private:
  TrainCheckpointer(const JobConfig& config, const DistributedRuntime& runtime,
                    std::unique_ptr<CheckpointManager> manager, CheckpointedParts parts,
                    absl::flat_hash_set<std::string> excluded);
  NamedTensors ModelState() const;
  // RecoverInterruptedRunsOf this checkpointer's folder.
  absl::Status RecoverInterruptedRuns() const;
  // Warns of the keys that differ from the configuration of the run that saved the loaded step;
  // without `trains` (nothing is left to train), that none of them applies.
  void LogKeysChangedSinceSavedRun(int64_t step, bool trains) const;
  // The newest step at or before `step` that `paired` also holds (see Resume).
  absl::StatusOr<int64_t> PairedStep(int64_t step, const TrainCheckpointer& paired) const;
  // Resume's work once the step is chosen; `manifest`: its manifest, opened already (null: not).
  absl::Status LoadStep(int64_t step, TrainState& state,
                        std::unique_ptr<CheckpointStep> manifest = nullptr);
  absl::Status SetAsideNewerSteps(int64_t step) const;
  // A restart's first save is committed: its journal goes and the on_set_aside callbacks run.
  absl::Status FinishRestart();
  // Refuses a step that another kind of run saved (parts_.run_kind).
  absl::Status CheckRunKind(const std::string& dir, const nlohmann::json& extra) const;
  // What this rank saves of `local`: its pieces in the first replica group (a piece several
  // tensor-parallel ranks hold, from the first of them), whole tensors on the rank at data-, context-
  // and tensor-parallel position 0 of each pipeline stage.
  NamedTensors PiecesToSave(const NamedTensors& local, TensorBoxes& boxes) const;
  absl::Status ExportHf(int64_t step, const NamedTensors& model) const;
  // After the ranks agreed that the save of `step` failed (none writes into it any more): its
  // temporary goes, so a disk it filled is freed before the run exits, and so does a final
  // (`model_only`) save's Hugging Face export, which must not stand without its step.
  void DiscardFailedSave(int64_t step, bool model_only) const;
  bool writer() const { return runtime_.rank() == 0; }

  const JobConfig& config_;
  const DistributedRuntime& runtime_;
  std::unique_ptr<CheckpointManager> manager_;
  std::unique_ptr<AsyncCheckpointSaver> async_saver_;  // [checkpoint] async_mode=async
  int64_t pending_step_ = -1;                          // the step async_saver_ writes
  CheckpointedParts parts_;
  absl::flat_hash_set<std::string> excluded_;  // [checkpoint] exclude_from_loading
  int64_t resumed_step_ = -1;
  std::string loaded_dir_;
  bool loaded_model_only_ = false;
  int64_t loaded_step_ = -1;
  std::string saved_run_config_;          // the loaded step's run's, as TOML; "": not recorded
  // This run's configuration as TOML, saved with each step (it cannot change during the run).
  const std::string run_config_toml_;
  bool set_aside_at_first_save_ = false;  // train_state excluded: the loaded timeline goes
  bool restart_saving_ = false;           // set aside, journaled, until the first save commits
  // The exclude_from_loading this run's timeline started with, saved with each step: a rerun of
  // the same job resumes those steps whole instead of starting over from them.
  std::vector<std::string> timeline_exclusions_;
  std::vector<std::function<absl::Status()>> on_set_aside_;
};

// How a run that resumed through `checkpointer` (null: none, a fresh run) continues its folder's
// per-step logs (metrics.jsonl, titan_rl's rollouts.jsonl).
StepLogStart LogStart(const TrainCheckpointer* checkpointer, const RunSetup& setup);

// BuildMetrics for a run that resumed through `checkpointer` (null: none): rows after the
// resumed step dropped, and a restart's metrics taking over at its first save (CommitRestart).
absl::StatusOr<std::unique_ptr<MetricsLogger>> BuildResumedMetrics(
    const JobConfig& config, const DistributedRuntime& runtime, const RunSetup& setup,
    TrainCheckpointer* checkpointer);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_TRAIN_CHECKPOINT_H_
