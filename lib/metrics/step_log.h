#ifndef TITAN_LIB_METRICS_STEP_LOG_H_
#define TITAN_LIB_METRICS_STEP_LOG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// How a run starts relative to the one that last wrote its folder's per-step logs.
struct StepLogStart {
  // The step a resumed run continues from; -1: the run starts over (fresh or a restart).
  int64_t resumed_step = -1;
  // The run counts from step 0 again over a loaded checkpoint's steps ([checkpoint]
  // exclude_from_loading = ["train_state"]): the earlier history stays until its first save.
  bool restart = false;
  // Names the files set aside, <path>.abandoned-<run_id>, and a restart's own,
  // <path>.restart-<run_id>.
  std::string run_id;
};

// A per-step JSON-lines log (metrics.jsonl, titan_rl's rollouts.jsonl) that a run appends to, so
// that each step has one row from the run whose steps the folder holds:
// - resumed: the earlier file stays, without the rows of the steps the run redoes (and a last row
//   cut short, e.g. by a full disk, which would break every JSON-lines reader);
// - fresh: an earlier run's file is set aside as <path>.abandoned-<run_id> (its steps were never
//   checkpointed here, or checkpointing is off, so this run does not continue them);
// - restart: rows go to <path>.restart-<run_id> until Commit, at the run's first save, sets the
//   earlier file aside and takes over <path>; a run that dies before saving leaves the earlier
//   history as it was, and the next run to start sets its rows aside as <path>.abandoned-<id>.
class StepLog {
 public:
  static absl::StatusOr<StepLog> Start(std::string path, const StepLogStart& start);

  // Where the run appends its rows now.
  const std::string& rows_path() const { return rows_path_; }
  // A restart's first save; a no-op otherwise and after the first.
  absl::Status Commit();
  bool commit_pending() const { return commit_pending_; }

 private:
  StepLog(std::string path, std::string rows_path, std::string run_id, bool commit_pending)
      : path_(std::move(path)),
        rows_path_(std::move(rows_path)),
        run_id_(std::move(run_id)),
        commit_pending_(commit_pending) {}

  // Renames an existing, non-empty `path_` to its abandoned name.
  absl::Status SetAsideEarlier() const;

  std::string path_;
  std::string rows_path_;
  std::string run_id_;
  bool commit_pending_;
};

}  // namespace titan

#endif  // TITAN_LIB_METRICS_STEP_LOG_H_
