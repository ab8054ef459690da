#include "lib/checkpoint/checkpoint_manager.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/checkpoint/checkpoint_manifest.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// A restart's journal of the steps it set aside: .restart-<run id>.json (SetAsideForRestart).
constexpr char kRestartJournalPrefix[] = ".restart-";
constexpr char kRestartJournalSuffix[] = ".json";

// What a run killed while writing its restart journal (SetAsideForRestart) leaves: the atomic
// write's `.restart-<run id>.json.tmp.<pid>`, never renamed, so no step was set aside yet.
bool IsJournalTemporaryName(absl::string_view name) {
  const std::optional<absl::string_view> journal = AtomicWriteTarget(name);
  return journal.has_value() && absl::StartsWith(*journal, kRestartJournalPrefix) &&
         absl::EndsWith(*journal, kRestartJournalSuffix);
}

using checkpoint_internal::Crc32;
using checkpoint_internal::GroupPieces;
using checkpoint_internal::kModelStem;
using checkpoint_internal::kOptimizerStem;
using checkpoint_internal::ParsePieceEntries;
using checkpoint_internal::PieceEntry;
using checkpoint_internal::PieceEntryToJson;
using checkpoint_internal::RankFileName;
using nlohmann::json;

constexpr char kStepPrefix[] = "step-";
constexpr char kTemporaryInfix[] = ".tmp-";
// Steps a restart or a rolled-back run set aside: kept, never read as steps.
constexpr char kAbandonedInfix[] = ".abandoned-";
constexpr char kUnfinishedInfix[] = ".unfinished-";

bool IsSet(const std::atomic<bool>* flag) {
  return flag != nullptr && flag->load(std::memory_order_relaxed);
}

// `name` is "step-<digits>": returns the step.
std::optional<int64_t> ParseStepName(const std::string& name) {
  if (!absl::StartsWith(name, kStepPrefix)) return std::nullopt;
  const std::string digits = name.substr(std::strlen(kStepPrefix));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) {
    return std::nullopt;
  }
  int64_t step;
  // "step-007" is not ours: StepDirectory(7) is "step-7".
  if (!absl::SimpleAtoi(digits, &step) || absl::StrCat(step) != digits) return std::nullopt;
  return step;
}

// A file (not a folder) named as a step: neither listed nor replaced by a save.
absl::Status NotAStepFolder(const std::string& path) {
  return absl::FailedPreconditionError(
      absl::StrCat(path, " is named as a checkpoint step but is not a folder: move it away"));
}

// Swaps `from` into `to` atomically where the filesystem can (renameat2 RENAME_EXCHANGE), leaving
// the old `to` at `from`; elsewhere moves the old `to` aside to `aside` first.
absl::Status ReplaceDirectory(const std::string& from, const std::string& to,
                              const std::string& aside, std::string& old_location) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    old_location = from;
    return absl::OkStatus();
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    return ErrnoError("exchange with " + to, from);
  }
  if (::rename(to.c_str(), aside.c_str()) != 0) return ErrnoError("rename to " + aside, to);
  if (::rename(from.c_str(), to.c_str()) != 0) {
    absl::Status status = ErrnoError("rename to " + to, from);
    ::rename(aside.c_str(), to.c_str());  // Put the old step back rather than lose it.
    return status;
  }
  old_location = aside;
  return absl::OkStatus();
}

// Compares the caller's tensors with a checkpoint's, collecting every problem in one message.
absl::Status CheckDestinations(const NamedTensors& destinations,
                               const std::vector<CheckpointStep::Tensor>& saved_tensors,
                               const TensorBoxes& boxes, const std::string& source, bool partial) {
  std::map<std::string, const CheckpointStep::Tensor*> saved;
  for (const CheckpointStep::Tensor& tensor : saved_tensors) saved[tensor.name] = &tensor;
  std::set<std::string> wanted;
  std::vector<std::string> missing, unexpected, mismatched, duplicated;
  for (const auto& [name, tensor] : destinations) {
    if (!wanted.insert(name).second) duplicated.push_back(name);
    auto it = saved.find(name);
    if (it == saved.end()) {
      missing.push_back(name);
      continue;
    }
    const std::vector<int64_t>& shape = it->second->shape;
    const auto box = boxes.find(name);
    std::string problem;
    if (!tensor.defined()) {
      problem = "undefined";
    } else if (box == boxes.end() && tensor.sizes().vec() != shape) {
      problem = ShapeString(tensor.sizes().vec());
    } else if (box != boxes.end()) {
      bool fits = box->second.global_shape == shape &&
                  box->second.offsets.size() == static_cast<size_t>(tensor.dim());
      for (int64_t d = 0; fits && d < tensor.dim(); ++d) {
        fits = box->second.offsets[d] >= 0 &&
               box->second.offsets[d] + tensor.size(d) <= box->second.global_shape[d];
      }
      if (!fits) {
        problem = absl::StrCat(ShapeString(tensor.sizes().vec()), " at ",
                               ShapeString(box->second.offsets), " of ",
                               ShapeString(box->second.global_shape));
      }
    }
    if (!problem.empty()) {
      mismatched.push_back(
          absl::StrCat(name, ": checkpoint ", ShapeString(shape), ", destination ", problem));
    }
  }
  for (const auto& [name, unused] : saved) {
    if (!partial && wanted.count(name) == 0) unexpected.push_back(name);
  }
  // The first few of each list: a whole other architecture would list hundreds of names.
  const auto few = [](const std::vector<std::string>& names, absl::string_view separator) {
    constexpr size_t kShown = 6;
    if (names.size() <= kShown) return absl::StrJoin(names, separator);
    return absl::StrCat(absl::StrJoin(names.begin(), names.begin() + kShown, separator), separator,
                        "... (", names.size(), " in all)");
  };
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back("missing keys: " + few(missing, ", "));
  if (!unexpected.empty()) problems.push_back("unexpected keys: " + few(unexpected, ", "));
  if (!duplicated.empty()) problems.push_back("duplicate keys: " + few(duplicated, ", "));
  if (!mismatched.empty()) problems.push_back("shape mismatch: " + few(mismatched, "; "));
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", absl::StrJoin(problems, "; ")));
}

std::string RankRecordPath(const std::string& dir, int rank, absl::string_view suffix) {
  return absl::StrFormat("%s/rank-%05d.%s", dir, rank, suffix);
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, int keep_latest_k, CheckpointRanks ranks)
    : root_(std::move(root)), keep_latest_k_(keep_latest_k), ranks_(std::move(ranks)) {
  if (ranks_.run_id.empty()) ranks_.run_id = absl::StrCat(::getpid());
}

CheckpointManager::~CheckpointManager() = default;

std::string CheckpointManager::StepDirectory(int64_t step) const {
  return absl::StrCat(root_, "/", kStepPrefix, step);
}

std::string CheckpointManager::HfExportDirectory(int64_t step) const {
  return StepDirectory(step) + "-hf";
}

absl::Status CheckpointManager::WriteRankFiles(const std::string& tmp_dir, int64_t step,
                                               const CheckpointState& state, bool model_only,
                                               uint64_t& total_bytes,
                                               const std::atomic<bool>* give_up_waiting) const {
  json pieces = json::array();
  auto write_file = [&](absl::string_view stem, const NamedTensors& named) -> absl::Status {
    NamedTensors kept;  // Empty pieces hold nothing (an FSDP rank past the last row).
    for (const auto& [name, tensor] : named) {
      const auto box = state.boxes.find(name);
      if (box != state.boxes.end()) {
        bool fits = box->second.global_shape.size() == static_cast<size_t>(tensor.dim()) &&
                    box->second.offsets.size() == static_cast<size_t>(tensor.dim());
        for (int64_t d = 0; fits && d < tensor.dim(); ++d) {
          fits = box->second.offsets[d] >= 0 &&
                 box->second.offsets[d] + tensor.size(d) <= box->second.global_shape[d];
        }
        if (!fits) {
          return absl::InvalidArgumentError(absl::StrCat(
              root_, ": step ", step, ": piece '", name, "' ", ShapeString(tensor.sizes().vec()),
              " at ", ShapeString(box->second.offsets), " does not fit in ",
              ShapeString(box->second.global_shape)));
        }
        if (tensor.numel() == 0) continue;
      }
      kept.emplace_back(name, tensor);
    }
    if (kept.empty()) return absl::OkStatus();
    // A model-only save is a consolidated export that rank 0 writes alone (whatever a reader
    // expects: model.safetensors); other ranks' tensors, if any, keep their rank's name.
    const bool consolidated = model_only && ranks_.rank == 0;
    const std::string file = consolidated ? RankFileName(stem, 0, 1)
                                          : RankFileName(stem, ranks_.rank, ranks_.world_size);
    std::map<std::string, uint32_t> crcs;
    auto busy_since = std::chrono::steady_clock::now();
    TITAN_RETURN_IF_ERROR(WriteSafetensors(
        absl::StrCat(tmp_dir, "/", file), kept, {{"format", "pt"}},
        [&](const std::string& name, absl::string_view bytes) {
          crcs[name] = Crc32(bytes);
          TITAN_RETURN_IF_ERROR(CheckStopSignal(stop_signal_));
          if (write_duty_cycle_ >= 1.0 || IsSet(give_up_waiting)) return absl::OkStatus();
          const auto busy = std::chrono::steady_clock::now() - busy_since;
          std::this_thread::sleep_for(busy * ((1.0 - write_duty_cycle_) / write_duty_cycle_));
          busy_since = std::chrono::steady_clock::now();
          return absl::OkStatus();
        }));
    for (const auto& [name, tensor] : kept) {
      const auto box = state.boxes.find(name);
      pieces.push_back(PieceEntryToJson(file, name, tensor, crcs.at(name),
                                        box == state.boxes.end() ? nullptr : &box->second));
      total_bytes += tensor.numel() * tensor.element_size();
    }
    return absl::OkStatus();
  };
  TITAN_RETURN_IF_ERROR(write_file(kModelStem, state.model));
  if (!model_only) TITAN_RETURN_IF_ERROR(write_file(kOptimizerStem, state.optimizer));
  const json record = {
      {"run_id", ranks_.run_id}, {"step", step}, {"rank", ranks_.rank}, {"tensors", pieces}};
  return WriteFileAtomically(RankRecordPath(tmp_dir, ranks_.rank, "json"), record.dump());
}

absl::Status CheckpointManager::Commit(const std::string& tmp_dir, int64_t step,
                                       const CheckpointState& state, bool model_only,
                                       const std::atomic<bool>* give_up_waiting) const {
  // Every rank's record, or the first failure a rank reported.
  const auto deadline =
      std::chrono::steady_clock::now() + absl::ToChronoMilliseconds(ranks_.commit_timeout);
  std::set<int> pending;
  for (int r = 0; r < ranks_.world_size; ++r) pending.insert(r);
  while (true) {
    for (auto it = pending.begin(); it != pending.end();) {
      const std::string failed = RankRecordPath(tmp_dir, *it, "failed");
      if (PathExists(failed)) {
        absl::StatusOr<std::string> why = ReadFile(failed);
        return absl::AbortedError(
            absl::StrCat(StepDirectory(step), ": rank ", *it,
                         " failed to write its part: ", why.ok() ? *why : "(reason unreadable)"));
      }
      it = PathExists(RankRecordPath(tmp_dir, *it, "json")) ? pending.erase(it) : std::next(it);
    }
    if (pending.empty()) break;
    if (IsSet(give_up_waiting)) {
      return absl::CancelledError(absl::StrCat(
          StepDirectory(step), ": given up (the caller is unwinding) while waiting for rank(s) ",
          absl::StrJoin(pending, ", "),
          " to finish writing their part; the step is not committed"));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(StepDirectory(step), ": rank(s) ", absl::StrJoin(pending, ", "),
                       " did not finish writing their part within ",
                       absl::FormatDuration(ranks_.commit_timeout), "; the step is not committed"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  json tensors = json::array();
  for (int r = 0; r < ranks_.world_size; ++r) {
    const std::string path = RankRecordPath(tmp_dir, r, "json");
    TITAN_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
    const json record = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || record.value("run_id", "") != ranks_.run_id ||
        record.value("step", int64_t{-1}) != step || !record.contains("tensors") ||
        !record.at("tensors").is_array()) {
      return absl::DataLossError(absl::StrCat(path, ": expected run ", ranks_.run_id, " step ",
                                              step, " with a tensors array"));
    }
    for (const json& entry : record.at("tensors")) tensors.push_back(entry);
  }
  // The same checks a reader makes, before anything is committed.
  TITAN_ASSIGN_OR_RETURN(std::vector<PieceEntry> entries, ParsePieceEntries(tmp_dir, tensors));
  std::vector<CheckpointStep::Tensor> model, optimizer;
  TITAN_RETURN_IF_ERROR(GroupPieces(tmp_dir, std::move(entries), model, optimizer));

  const json manifest = {{"format_version", kCheckpointFormatVersion},
                         {"step", step},
                         {"model_only", model_only},
                         {"world_size", ranks_.world_size},
                         {"tensors", tensors},
                         {"state", state.extra}};
  std::string manifest_text;
  try {
    manifest_text = manifest.dump(2);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(tmp_dir, "/", kCheckpointManifestFile, ": cannot encode: ", e.what()));
  }
  TITAN_RETURN_IF_ERROR(
      WriteFileAtomically(absl::StrCat(tmp_dir, "/", kCheckpointManifestFile), manifest_text));
  for (int r = 0; r < ranks_.world_size; ++r) {
    ::unlink(RankRecordPath(tmp_dir, r, "json").c_str());
  }
  TITAN_RETURN_IF_ERROR(FsyncDirectory(tmp_dir));

  // Commit: step-<N> appears whole in one rename (or one exchange when replacing it).
  const std::string final_dir = StepDirectory(step);
  std::string old_dir;
  if (PathExists(final_dir) && !IsDirectory(final_dir)) return NotAStepFolder(final_dir);
  if (PathExists(final_dir)) {
    TITAN_RETURN_IF_ERROR(
        ReplaceDirectory(tmp_dir, final_dir, absl::StrCat(tmp_dir, "-replaced"), old_dir));
  } else if (::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
    return ErrnoError("rename to " + final_dir, tmp_dir);
  }
  TITAN_RETURN_IF_ERROR(FsyncDirectory(root_));
  if (!old_dir.empty()) {
    const absl::Status removed = RemoveTree(old_dir);
    if (!removed.ok()) {
      LOG(WARNING) << "Replaced " << final_dir << " but kept the old copy: " << removed;
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointManager::Save(int64_t step, const CheckpointState& state, bool model_only,
                                     const std::atomic<bool>* give_up_waiting) {
  const auto start = std::chrono::steady_clock::now();
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(root_, ": step ", step, " is negative"));
  }
  if (!state.extra.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(root_, ": step ", step,
                                                   ": extra state must be a JSON object, got ",
                                                   state.extra.type_name()));
  }
  TITAN_RETURN_IF_ERROR(MakeDirectories(root_));
  const std::string tmp_dir = absl::StrCat(StepDirectory(step), kTemporaryInfix, ranks_.run_id);
  const bool alone = ranks_.world_size == 1;
  // Other ranks may already be writing into this step's temporary: rank 0 spares it.
  if (ranks_.rank == 0) TITAN_RETURN_IF_ERROR(RemoveStaleTemporaries(alone ? "" : tmp_dir));
  if (::mkdir(tmp_dir.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir", tmp_dir);

  uint64_t bytes = 0;
  absl::Status status = WriteRankFiles(tmp_dir, step, state, model_only, bytes, give_up_waiting);
  if (!status.ok()) {
    // Tells rank 0 at once instead of letting it wait out the commit timeout.
    WriteFileAtomically(RankRecordPath(tmp_dir, ranks_.rank, "failed"), status.ToString())
        .IgnoreError();
    if (alone) RemoveTree(tmp_dir).IgnoreError();  // Best effort: the next Save removes it anyway.
    return status;
  }
  if (ranks_.rank != 0) return absl::OkStatus();
  status = Commit(tmp_dir, step, state, model_only, give_up_waiting);
  if (!status.ok()) {
    if (alone) RemoveTree(tmp_dir).IgnoreError();
    return status;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LOG(INFO) << "Saved checkpoint " << StepDirectory(step) << (model_only ? " (model only)" : "")
            << ": " << state.model.size() + (model_only ? 0 : state.optimizer.size())
            << " tensors, " << bytes / 1e6 << " MB"
            << (alone ? "" : absl::StrCat(" from rank 0 of ", ranks_.world_size)) << " in "
            << seconds << " s";
  return EnforceKeepLatest();
}

absl::Status CheckpointManager::DiscardFailedSave(int64_t step) const {
  // One remover: ranks removing the same tree at once would trip over each other's unlinks.
  if (ranks_.rank != 0) return absl::OkStatus();
  const std::string tmp_dir = absl::StrCat(StepDirectory(step), kTemporaryInfix, ranks_.run_id);
  if (PathExists(tmp_dir)) {
    TITAN_RETURN_IF_ERROR(RemoveTree(tmp_dir));
    LOG(INFO) << "Removed " << tmp_dir << ", the temporary of the failed save of step " << step;
  }
  // A restart whose first save failed has not taken over: the steps it set aside come back now,
  // as the next run would put them back, so the folder holds its last good step in the meantime.
  const std::string journal =
      absl::StrCat(root_, "/", kRestartJournalPrefix, ranks_.run_id, kRestartJournalSuffix);
  if (PathExists(journal)) TITAN_RETURN_IF_ERROR(RecoverInterruptedRuns());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> CheckpointManager::ListSteps() const {
  std::vector<int64_t> steps;
  if (!PathExists(root_)) return steps;
  TITAN_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListDirectory(root_));
  for (const std::string& name : names) {
    std::optional<int64_t> step = ParseStepName(name);
    if (!step) continue;
    const std::string path = absl::StrCat(root_, "/", name);
    // Refused rather than skipped: the save of that step would replace it.
    if (!IsDirectory(path)) return NotAStepFolder(path);
    steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::string> CheckpointManager::UncommittedStepFolders() const {
  std::vector<std::string> found;
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(root_);
  if (!names.ok()) return found;
  for (const std::string& name : *names) {
    const size_t dot = name.find('.');
    if (dot == std::string::npos || !ParseStepName(name.substr(0, dot))) continue;
    const absl::string_view rest = absl::string_view(name).substr(dot);
    if (absl::StartsWith(rest, kTemporaryInfix) || absl::StartsWith(rest, kAbandonedInfix) ||
        absl::StartsWith(rest, kUnfinishedInfix)) {
      found.push_back(name);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

absl::StatusOr<int64_t> CheckpointManager::LatestStep() const {
  TITAN_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListSteps());
  if (steps.empty()) return absl::NotFoundError(absl::StrCat(root_, ": no checkpoints"));
  return steps.back();
}

absl::StatusOr<std::vector<int64_t>> CheckpointManager::SetAsideStepsAfter(
    int64_t step, absl::string_view why) const {
  TITAN_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListSteps());
  const std::vector<int64_t> newer(std::upper_bound(steps.begin(), steps.end(), step), steps.end());
  if (ranks_.rank != 0) return newer;
  for (const int64_t abandoned : newer) {
    const std::string dir = StepDirectory(abandoned);
    const std::string aside = absl::StrCat(dir, kAbandonedInfix, ranks_.run_id);
    if (::rename(dir.c_str(), aside.c_str()) != 0) return ErrnoError("rename to " + aside, dir);
    LOG(WARNING) << "Set aside " << dir << " as " << aside << ": " << why
                 << "; rename it back to resume it";
    // Its Hugging Face export goes with it: left, it would pass for the new timeline's step.
    const std::string export_dir = HfExportDirectory(abandoned);
    if (IsDirectory(export_dir)) {
      const std::string export_aside = absl::StrCat(export_dir, kAbandonedInfix, ranks_.run_id);
      if (::rename(export_dir.c_str(), export_aside.c_str()) != 0) {
        return ErrnoError("rename to " + export_aside, export_dir);
      }
      LOG(WARNING) << "Set aside " << export_dir << " as " << export_aside;
    }
  }
  return newer;
}

absl::StatusOr<std::vector<int64_t>> CheckpointManager::SetAsideForRestart(
    int64_t saving, absl::string_view why) const {
  if (ranks_.rank == 0) {
    TITAN_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, ListSteps());
    const json journal = {{"run_id", ranks_.run_id}, {"steps", steps}, {"saving", saving}};
    TITAN_RETURN_IF_ERROR(WriteFileAtomically(
        absl::StrCat(root_, "/", kRestartJournalPrefix, ranks_.run_id, kRestartJournalSuffix),
        journal.dump()));
  }
  return SetAsideStepsAfter(0, why);
}

absl::Status CheckpointManager::FinishRestart() const {
  if (ranks_.rank != 0) return absl::OkStatus();
  const std::string journal =
      absl::StrCat(root_, "/", kRestartJournalPrefix, ranks_.run_id, kRestartJournalSuffix);
  if (::unlink(journal.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink", journal);
  return FsyncDirectory(root_);
}

absl::Status CheckpointManager::RecoverInterruptedRuns() const {
  if (ranks_.rank != 0 || !PathExists(root_)) return absl::OkStatus();
  TITAN_RETURN_IF_ERROR(RemoveStaleTemporaries(""));
  TITAN_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListDirectory(root_));
  for (const std::string& name : names) {
    if (!absl::StartsWith(name, kRestartJournalPrefix) ||
        !absl::EndsWith(name, kRestartJournalSuffix)) {
      continue;
    }
    const std::string path = absl::StrCat(root_, "/", name);
    TITAN_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
    const json journal = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!journal.is_object() || !journal.value("run_id", json()).is_string() ||
        !journal.value("steps", json()).is_array()) {
      return absl::DataLossError(
          absl::StrCat(path, ": expected {\"run_id\": ..., \"steps\": [...]}"));
    }
    const std::string run_id = journal.at("run_id").get<std::string>();
    // Its save may have been committed: it goes too, or it would mix into the loaded run's steps.
    const json saving = journal.value("saving", json());
    if (saving.is_number_integer() && IsDirectory(StepDirectory(saving.get<int64_t>()))) {
      const std::string dir = StepDirectory(saving.get<int64_t>());
      const std::string aside = absl::StrCat(dir, kUnfinishedInfix, run_id);
      if (::rename(dir.c_str(), aside.c_str()) != 0) return ErrnoError("rename to " + aside, dir);
      LOG(WARNING) << "Set aside " << dir << " as " << aside << ": the first save of run " << run_id
                   << ", which counted from step 0 again and stopped before it took over";
    }
    for (const json& step : journal.at("steps")) {
      if (!step.is_number_integer()) continue;
      const std::string dir = StepDirectory(step.get<int64_t>());
      for (const std::string& put_back : {dir, HfExportDirectory(step.get<int64_t>())}) {
        const std::string aside = absl::StrCat(put_back, kAbandonedInfix, run_id);
        if (!IsDirectory(aside) || PathExists(put_back)) continue;
        if (::rename(aside.c_str(), put_back.c_str()) != 0) {
          return ErrnoError("rename to " + put_back, aside);
        }
        LOG(WARNING) << "Put back " << put_back << ", set aside by run " << run_id
                     << ", which counted from step 0 again and did not finish its first save";
      }
    }
    TITAN_RETURN_IF_ERROR(FsyncDirectory(root_));
    if (::unlink(path.c_str()) != 0) return ErrnoError("unlink", path);
  }
  return absl::OkStatus();
}

absl::Status CheckStopSignal(const std::atomic<int>* stop_signal) {
  if (stop_signal == nullptr || stop_signal->load() == 0) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat("stopped by signal ", stop_signal->load()));
}

bool IsStepTemporaryName(absl::string_view name) {
  return absl::StartsWith(name, kStepPrefix) && absl::StrContains(name, kTemporaryInfix);
}

absl::Status CheckpointManager::RemoveStaleTemporaries(const std::string& keep) const {
  TITAN_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListDirectory(root_));
  for (const std::string& name : names) {
    const bool journal = IsJournalTemporaryName(name);
    if (!IsStepTemporaryName(name) && !journal) continue;
    const std::string path = absl::StrCat(root_, "/", name);
    if (path == keep) continue;
    LOG(WARNING) << "Removing " << path << " left by an interrupted "
                 << (journal                            ? "write of a restart's journal"
                     : absl::EndsWith(name, "-deleted") ? "deletion"
                                                        : "save");
    // Never read as a step, a temporary that stays (not ours to delete, say) costs only disk.
    if (const absl::Status removed = RemoveTree(path); !removed.ok()) {
      LOG(WARNING) << "could not remove it, left in place: " << removed.message();
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointManager::EnforceKeepLatest(int64_t in_use) const {
  // One deleter: ranks renaming the same step at once would trip over each other.
  if (keep_latest_k_ <= 0 || ranks_.rank != 0) return absl::OkStatus();
  TITAN_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ListSteps());
  steps.erase(std::remove(steps.begin(), steps.end(), kept_step_), steps.end());
  const size_t keep = static_cast<size_t>(keep_latest_k_);
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    if (steps[i] == in_use) continue;
    const std::string dir = StepDirectory(steps[i]);
    // Renamed first so a crash mid-delete leaves a temporary, never a half step.
    const std::string doomed = absl::StrCat(dir, kTemporaryInfix, ranks_.run_id, "-deleted");
    // A step that cannot go (not ours to delete, a snapshot) is kept: training goes on.
    absl::Status removed = ::rename(dir.c_str(), doomed.c_str()) == 0
                               ? RemoveTree(doomed)
                               : ErrnoError("rename to " + doomed, dir);
    if (!removed.ok()) {
      LOG(WARNING) << "keep_latest_k=" << keep_latest_k_ << ": could not delete " << dir
                   << ", left in place: " << removed.message();
      continue;
    }
    LOG(INFO) << "Deleted checkpoint " << dir << " (keep_latest_k=" << keep_latest_k_ << ")";
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointState> CheckpointManager::Load(int64_t step, bool verify_checksums) const {
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointStep> open,
                         CheckpointStep::Open(StepDirectory(step), step));
  CheckpointState state;
  state.extra = open->state();
  auto load_all = [&](const std::vector<CheckpointStep::Tensor>& tensors,
                      NamedTensors& out) -> absl::Status {
    for (const CheckpointStep::Tensor& tensor : tensors) {
      at::Tensor whole;
      try {
        whole = at::empty(tensor.shape, at::TensorOptions().dtype(tensor.scalar_type));
      } catch (const c10::Error& e) {
        return absl::ResourceExhaustedError(
            absl::StrCat(open->directory(), ": tensor '", tensor.name,
                         "': allocation failed: ", e.what_without_backtrace()));
      }
      TITAN_RETURN_IF_ERROR(open->ReadInto(tensor, whole, nullptr, verify_checksums));
      out.emplace_back(tensor.name, whole);
    }
    return absl::OkStatus();
  };
  TITAN_RETURN_IF_ERROR(load_all(open->model(), state.model));
  TITAN_RETURN_IF_ERROR(load_all(open->optimizer(), state.optimizer));
  return state;
}

absl::Status CheckpointManager::LoadInto(int64_t step, const NamedTensors& model,
                                         const NamedTensors* optimizer, nlohmann::json* extra,
                                         const TensorBoxes& boxes, bool verify_checksums,
                                         bool partial) const {
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointStep> open,
                         CheckpointStep::Open(StepDirectory(step), step));
  if (optimizer != nullptr && open->model_only()) {
    return absl::FailedPreconditionError(
        absl::StrCat(open->directory(), ": model-only checkpoint has no optimizer state"));
  }
  TITAN_RETURN_IF_ERROR(
      CheckDestinations(model, open->model(), boxes, open->directory() + " (model)", partial));
  if (optimizer != nullptr) {
    TITAN_RETURN_IF_ERROR(CheckDestinations(*optimizer, open->optimizer(), boxes,
                                            open->directory() + " (optimizer)", partial));
  }
  auto load = [&](const std::vector<CheckpointStep::Tensor>& saved,
                  const NamedTensors& destinations) -> absl::Status {
    std::map<std::string, const CheckpointStep::Tensor*> by_name;
    for (const CheckpointStep::Tensor& tensor : saved) by_name[tensor.name] = &tensor;
    for (const auto& [name, destination] : destinations) {
      const auto box = boxes.find(name);
      TITAN_RETURN_IF_ERROR(open->ReadInto(*by_name.at(name), destination,
                                           box == boxes.end() ? nullptr : &box->second,
                                           verify_checksums));
    }
    return absl::OkStatus();
  };
  TITAN_RETURN_IF_ERROR(load(open->model(), model));
  if (optimizer != nullptr) TITAN_RETURN_IF_ERROR(load(open->optimizer(), *optimizer));
  if (extra != nullptr) *extra = open->state();
  return absl::OkStatus();
}

}  // namespace titan
