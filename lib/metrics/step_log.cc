#include "lib/metrics/step_log.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

// Rewrites `path` (atomically; a missing one stays missing) without the rows whose "step" is
// after `step` and without a last row cut short. Other rows it cannot read stay.
absl::Status DropRowsAfter(const std::string& path, int64_t step) {
  if (!PathExists(path)) return absl::OkStatus();
  TITAN_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  const size_t complete = text.rfind('\n') + 1;  // 0 when no line is complete
  const bool cut_short = complete < text.size();
  if (cut_short) {
    // A whole row that lost only its newline stays: its step may not be redone.
    if (nlohmann::json::parse(text.substr(complete), nullptr, false).is_object()) {
      text += '\n';
    } else {
      LOG(WARNING) << path << ": dropped its last row, cut short: " << text.substr(complete, 80);
      text.resize(complete);
    }
  }
  std::string kept;
  int dropped = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto at = row.is_object() ? row.find("step") : row.end();
    if (at != row.end() && at->is_number_integer() && at->get<int64_t>() > step) {
      ++dropped;
      continue;
    }
    absl::StrAppend(&kept, line, "\n");
  }
  if (dropped == 0 && !cut_short) return absl::OkStatus();
  if (dropped > 0) {
    LOG(INFO) << path << ": dropped " << dropped << " rows of steps after " << step
              << ", logged before the run resumed from step " << step;
  }
  return WriteFileAtomically(path, kept);
}

// Renames the rows of restarts that stopped before their first save (<path>.restart-<id>, none
// of them `own_run_id`) to <path>.abandoned-<id>: the folder's lock says their runs are gone.
absl::Status SetAsideDeadRestarts(const std::string& path, const std::string& own_run_id) {
  const std::string folder = Dirname(path);
  const std::string prefix = absl::StrCat(path.substr(path.find_last_of('/') + 1), ".restart-");
  // A folder not there yet holds no restarts.
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(folder);
  if (!names.ok()) return absl::OkStatus();
  for (const std::string& name : *names) {
    if (!absl::StartsWith(name, prefix) || name == prefix + own_run_id) continue;
    const std::string restart = JoinPath(folder, name);
    const std::string aside =
        absl::StrCat(path, ".abandoned-", absl::string_view(name).substr(prefix.size()));
    TITAN_RETURN_IF_ERROR(RenamePath(restart, aside));
    LOG(WARNING) << "Set aside " << restart << " as " << aside
                 << ": the rows of a restart that stopped before its first save";
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<StepLog> StepLog::Start(std::string path, const StepLogStart& start) {
  TITAN_RETURN_IF_ERROR(SetAsideDeadRestarts(path, start.run_id));
  if (start.resumed_step >= 0) {
    TITAN_RETURN_IF_ERROR(DropRowsAfter(path, start.resumed_step));
    std::string rows_path = path;
    return StepLog(std::move(path), std::move(rows_path), start.run_id, false);
  }
  if (start.run_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a run that starts over needs a run id"));
  }
  std::string rows_path = start.restart ? absl::StrCat(path, ".restart-", start.run_id) : path;
  StepLog log(std::move(path), std::move(rows_path), start.run_id, start.restart);
  if (!start.restart) TITAN_RETURN_IF_ERROR(log.SetAsideEarlier());
  return log;
}

absl::Status StepLog::SetAsideEarlier() const {
  if (FileSize(path_).value_or(0) == 0) return absl::OkStatus();
  const std::string aside = absl::StrCat(path_, ".abandoned-", run_id_);
  TITAN_RETURN_IF_ERROR(RenamePath(path_, aside));
  LOG(WARNING) << "Set aside " << path_ << " as " << aside
               << ": an earlier run's, whose steps this run does not continue";
  return absl::OkStatus();
}

absl::Status StepLog::Commit() {
  if (!commit_pending_) return absl::OkStatus();
  commit_pending_ = false;
  TITAN_RETURN_IF_ERROR(SetAsideEarlier());
  if (!PathExists(rows_path_)) {
    rows_path_ = path_;
    return absl::OkStatus();
  }
  // A file open for appending follows its rename.
  TITAN_RETURN_IF_ERROR(RenamePath(rows_path_, path_));
  rows_path_ = path_;
  return absl::OkStatus();
}

}  // namespace titan
