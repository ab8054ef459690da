#ifndef TITAN_LIB_CHECKPOINT_CHECKPOINT_MANAGER_H_
#define TITAN_LIB_CHECKPOINT_CHECKPOINT_MANAGER_H_

// Checkpoints of a training run, one directory per step:
//   <root>/step-<N>/model.safetensors      model tensors
//                   optimizer.safetensors  flattened optimizer state (absent when model-only)
//                   manifest.json          format version, step, each tensor's file, dtype, shape,
//                                          byte count and CRC-32, and the caller's JSON state
// A step is written into step-<N>.tmp-<pid>/ and renamed into place once complete and fsynced, so
// step-<N> is either absent or whole; leftover *.tmp-* directories are never listed and are removed
// by the next Save. Single process: two managers must not save into one root at once.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/checkpoint/safetensors.h"
#include "nlohmann/json.hpp"

namespace titan {

inline constexpr int kCheckpointFormatVersion = 1;
// File names inside a step directory (readers such as lib/interop use them too).
inline constexpr char kCheckpointModelFile[] = "model.safetensors";
inline constexpr char kCheckpointOptimizerFile[] = "optimizer.safetensors";
inline constexpr char kCheckpointManifestFile[] = "manifest.json";

// What one step saves and loads.
struct CheckpointState {
  NamedTensors model;      // Parameter name -> tensor.
  NamedTensors optimizer;  // Flattened optimizer state, e.g. "exp_avg.<param>".
  nlohmann::json extra = nlohmann::json::object();  // "lr_scheduler", "dataloader", "rng" ...
};

class CheckpointManager {
 public:
  // `root` is <dump_folder>/<checkpoint folder>; keep_latest_k > 0 keeps only that many newest
  // steps after each successful save, 0 keeps all.
  CheckpointManager(std::string root, int keep_latest_k);

  const std::string& root() const { return root_; }

  // Saves `state` as step `step`, replacing that step if it exists. model_only leaves out the
  // optimizer. Tensors may live on any device; they are copied to CPU one at a time.
  absl::Status Save(int64_t step, const CheckpointState& state, bool model_only);

  // Committed steps, ascending; empty when the root does not exist yet.
  absl::StatusOr<std::vector<int64_t>> ListSteps() const;

  // The newest committed step; NotFound when there is none.
  absl::StatusOr<int64_t> LatestStep() const;

  // Loads a step as CPU tensors, in the order they were saved. verify_checksums re-reads every
  // tensor's bytes against the manifest's CRC-32 (one extra pass over memory-mapped data).
  absl::StatusOr<CheckpointState> Load(int64_t step, bool verify_checksums = true) const;

  // Loads a step into existing tensors in place (copy_: any device, dtype converted). The names in
  // `model` (and `optimizer` unless it is null) must match the checkpoint's exactly and every shape
  // must agree; all of that is checked before any tensor is written. `extra` (if not null) receives
  // the saved JSON state.
  absl::Status LoadInto(int64_t step, const NamedTensors& model, const NamedTensors* optimizer,
                        nlohmann::json* extra, bool verify_checksums = true) const;

  // The directory a committed step lives in.
  std::string StepDirectory(int64_t step) const;

 private:
  struct OpenStep;

  absl::StatusOr<OpenStep> Open(int64_t step, bool need_optimizer, bool verify_checksums) const;
  absl::Status RemoveStaleTemporaries() const;
  absl::Status EnforceKeepLatest() const;

  std::string root_;
  int keep_latest_k_;
};

}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_CHECKPOINT_MANAGER_H_
