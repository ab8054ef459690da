#ifndef TITAN_LIB_CHECKPOINT_CHECKPOINT_MANAGER_H_
#define TITAN_LIB_CHECKPOINT_CHECKPOINT_MANAGER_H_

// Checkpoints of a training run, one directory per step, written by every rank of a job at once:
//   <root>/step-<N>/model.safetensors          one process: model tensors
//                   optimizer.safetensors      flattened optimizer state (absent when model-only)
//                   model-<r>-of-<w>.safetensors, optimizer-<r>-of-<w>.safetensors
//                                              w ranks: rank r's pieces (e.g. its FSDP shards)
//                   manifest.json              format version, step, every piece: its file, dtype,
//                                              shape, bytes, CRC-32 and, for a piece of a larger
//                                              tensor, that tensor's shape and the piece's offsets;
//                                              and the caller's JSON state
// Ranks write their files into step-<N>.tmp-<run id>/ in parallel; rank 0 waits for every rank's
// record, writes the manifest and renames the directory into place, so step-<N> is either absent or
// whole. Loading reshards: a rank reads the parts of the saved pieces that overlap the pieces it
// holds now, whatever layout saved them. A failed save's temporary is removed once the ranks agree
// it failed (DiscardFailedSave); one a crash left behind is never listed and is removed by rank 0's
// next Save. Two jobs must not save into one root at once.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/checkpoint/checkpoint_manifest.h"
#include "lib/checkpoint/checkpoint_step.h"
#include "lib/checkpoint/safetensors.h"
#include "nlohmann/json.hpp"

namespace titan {

// What one rank saves for one step, or what it loads.
struct CheckpointState {
  NamedTensors model;      // Parameter name -> tensor.
  NamedTensors optimizer;  // Flattened optimizer state, e.g. "<param>.exp_avg".
  nlohmann::json extra = nlohmann::json::object();  // "lr_scheduler", "dataloader", "rng" ...
  TensorBoxes boxes;  // Entries of model and optimizer that are pieces (names are distinct).
};

// The ranks that save together. Every rank of a job builds its manager with the same root and
// run_id (unique per run: it names the temporary directories, so a crashed run's leftovers are
// never mistaken for this run's).
struct CheckpointRanks {
  int rank = 0;
  int world_size = 1;
  std::string run_id;  // Empty: this process's pid (one process only).
  absl::Duration commit_timeout = absl::Minutes(10);  // Rank 0's wait for the other ranks' files.
};

// Whether `name` in a checkpoint folder is a step's temporary (step-<N>.tmp-...): a save's, or a
// deletion's, that a crash may leave behind; never read as a step.
bool IsStepTemporaryName(absl::string_view name);

// Cancelled ("stopped by signal N") once *stop_signal is non-zero, else OK (null: never): a long
// write checks it between tensors.
absl::Status CheckStopSignal(const std::atomic<int>* stop_signal);

class CheckpointManager {
 public:
  // `root` is <dump_folder>/<checkpoint folder>; keep_latest_k > 0 keeps only that many newest
  // steps after each successful save (and at EnforceKeepLatest), 0 keeps all.
  CheckpointManager(std::string root, int keep_latest_k, CheckpointRanks ranks = {});
  ~CheckpointManager();

  const std::string& root() const { return root_; }
  const CheckpointRanks& ranks() const { return ranks_; }

  // Paces this rank's writes (for saves in the background): after each tensor the writer pauses so
  // that writing takes `fraction` of the time, leaving the cores to training in between; the save
  // takes about 1 / fraction as long. 1 (the default): no pauses.
  void set_write_duty_cycle(double fraction) { write_duty_cycle_ = fraction; }
  // A step keep_latest_k neither deletes nor counts (titan_rl's step-0 seed checkpoint: its KL
  // reference's weights); -1: none.
  void set_kept_step(int64_t step) { kept_step_ = step; }
  // A save stops after the tensor it is writing once *stop_signal is non-zero (Cancelled, no step
  // written): for a tool whose SIGINT/SIGTERM ends the save, not waits for it. Null: never. (Save's
  // give_up_waiting only ends the waiting, for a save that may still commit.)
  void set_stop_signal(const std::atomic<int>* stop_signal) { stop_signal_ = stop_signal; }

  // Saves this rank's `state` as part of step `step`, replacing that step if it exists. Every rank
  // calls it for the same step with its own tensors (none is fine: whole tensors come from one
  // rank, pieces from their holders) and the same model_only; `extra` is taken from rank 0.
  // model_only leaves out the optimizer. Tensors may live on any device; they are copied to CPU one
  // at a time. Rank 0 returns once the step is committed (or failed, naming the ranks that did not
  // finish within commit_timeout); other ranks return once their own files are durable, so callers
  // agree on the outcome (a barrier) before relying on the step.
  // Once *give_up_waiting is true (the caller is ending with an error; null: never), this rank
  // waits no more: the rest of its files are written without pauses and rank 0 stops waiting for
  // the other ranks' (Cancelled, the step not committed, its temporary left for the next Save): a
  // dead rank's never come. Unlike set_stop_signal's flag, it does not stop this rank's writes.
  absl::Status Save(int64_t step, const CheckpointState& state, bool model_only,
                    const std::atomic<bool>* give_up_waiting = nullptr);
  // Call on every rank once all ranks' Save of `step` returned and they agreed that one failed, so
  // that none writes into its temporary any more: rank 0 removes step-<N>.tmp-<run id> (a partial
  // save can fill the disk) and, when it was a restart's first save (SetAsideForRestart), puts the
  // steps it set aside back (RecoverInterruptedRuns); the other ranks do nothing. Committed steps
  // are never touched.
  absl::Status DiscardFailedSave(int64_t step) const;

  // Committed steps, ascending; empty when the root does not exist yet. A file named as a step is
  // an error (Save refuses to replace it too).
  absl::StatusOr<std::vector<int64_t>> ListSteps() const;
  // What saves and restarts left beside the steps, sorted: step-N.tmp-* (a save that did not
  // finish), step-N.abandoned-* and step-N.unfinished-* (steps a restart set aside).
  std::vector<std::string> UncommittedStepFolders() const;

  // Rank 0 deletes the oldest committed steps beyond keep_latest_k (the kept step neither goes
  // nor counts; `in_use`, a step being loaded, counts but stays); the other ranks delete nothing.
  // Save calls it after each commit; a run calls it once it resumed, since a crash between a
  // save's commit and this cleanup leaves one step too many. A step that cannot go stays (logged).
  absl::Status EnforceKeepLatest(int64_t in_use = -1) const;

  // The newest committed step; NotFound when there is none.
  absl::StatusOr<int64_t> LatestStep() const;

  // Renames the committed steps after `step` to step-<N>.abandoned-<run id> (rank 0; the other
  // ranks rename nothing): a run resumed from an earlier step (load_step), or counting from 0
  // again, starts a new timeline, and a later resume must take its saves, not the old timeline's
  // newer steps. `why` goes in the log. Returns those steps.
  absl::StatusOr<std::vector<int64_t>> SetAsideStepsAfter(int64_t step,
                                                          absl::string_view why) const;

  // SetAsideStepsAfter(0) for a run that counts from step 0 again before it saves `saving`,
  // journaled: rank 0 first records the steps in .restart-<run id>.json, so that until
  // FinishRestart (once that save is committed and the run's logs took over)
  // RecoverInterruptedRuns can undo it: a run that dies first leaves the steps it loaded from.
  absl::StatusOr<std::vector<int64_t>> SetAsideForRestart(int64_t saving,
                                                          absl::string_view why) const;
  absl::Status FinishRestart() const;
  // Rank 0: undoes the set-aside of restarts that died before FinishRestart (their own committed
  // save goes aside as step-<N>.unfinished-<run id>, the steps they set aside come back) and
  // removes the temporaries of interrupted saves, deletions and journal writes (the folder is the
  // locked run's, so none is being written); a resume calls it before choosing
  // its step (a run refused then still leaves the folder tidy).
  absl::Status RecoverInterruptedRuns() const;

  // Loads a step as whole CPU tensors (pieces joined), in the order they were saved.
  // verify_checksums re-reads every piece's bytes against the manifest's CRC-32.
  absl::StatusOr<CheckpointState> Load(int64_t step, bool verify_checksums = true) const;

  // Loads a step into existing tensors in place (copy_: any device, dtype converted). Entries named
  // in `boxes` are pieces and receive the saved values inside their box, from whichever saved
  // pieces overlap it (resharding); others receive whole tensors. The names in `model` (and
  // `optimizer` unless it is null) must match the checkpoint's exactly, or with `partial` be among
  // them (a pipeline stage holds part of the model), and every shape must agree; all of that is
  // checked before any tensor is written. `extra` (if not null) receives the saved JSON state. A
  // model-only step with a non-null `optimizer` is FailedPrecondition.
  absl::Status LoadInto(int64_t step, const NamedTensors& model, const NamedTensors* optimizer,
                        nlohmann::json* extra, const TensorBoxes& boxes = {},
                        bool verify_checksums = true, bool partial = false) const;

  // The directory a committed step lives in.
  std::string StepDirectory(int64_t step) const;
  // Where a step's Hugging Face export ([checkpoint] last_save_in_hf) lives, beside the step: it is
  // set aside and put back with it.
  std::string HfExportDirectory(int64_t step) const;

 private:
  absl::Status WriteRankFiles(const std::string& tmp_dir, int64_t step,
                              const CheckpointState& state, bool model_only, uint64_t& total_bytes,
                              const std::atomic<bool>* give_up_waiting) const;
  absl::Status Commit(const std::string& tmp_dir, int64_t step, const CheckpointState& state,
                      bool model_only, const std::atomic<bool>* give_up_waiting) const;
  absl::Status RemoveStaleTemporaries(const std::string& keep) const;

  std::string root_;
  int keep_latest_k_;
  CheckpointRanks ranks_;
  double write_duty_cycle_ = 1.0;
  int64_t kept_step_ = -1;
  const std::atomic<int>* stop_signal_ = nullptr;
};

}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_CHECKPOINT_MANAGER_H_
