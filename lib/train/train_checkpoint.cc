#include "lib/train/train_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/checkpoint/checkpoint_step.h"
#include "lib/checkpoint/rng_state.h"
#include "lib/config/job_config.h"
#include "lib/interop/checkpoint_model.h"
#include "lib/interop/convert.h"
#include "lib/tokenizer/tokenizer_loader.h"
#include "lib/train/components.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/saved_json_field.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Each tensor's largest |value| (NaN or inf where it holds one; 0 when empty): its minimum and
// maximum (one reduction per tensor, no copy of it), read back to the host at once.
std::vector<float> LargestMagnitudes(const std::vector<ParamRef>& params) {
  if (params.empty()) return {};
  std::vector<at::Tensor> largest;
  for (const ParamRef& p : params) {
    if (p.tensor->numel() == 0) {
      largest.push_back(at::zeros({}, p.tensor->options().dtype(at::kFloat)));
      continue;
    }
    auto [min, max] = at::aminmax(p.tensor->detach());
    largest.push_back(at::maximum(min.abs(), max.abs()).to(at::kFloat));
  }
  const at::Tensor host = at::stack(largest).cpu();
  return std::vector<float>(host.data_ptr<float>(), host.data_ptr<float>() + host.numel());
}

// Whether `value` is written as inf in `type` (rounded to nearest, as Tensor::to rounds): past
// the type's largest value by half its last step or more.
bool RoundsToInf(float value, at::ScalarType type) {
  switch (type) {
    case at::kHalf:
      return std::isinf(static_cast<float>(c10::Half(value)));
    case at::kBFloat16:
      return std::isinf(static_cast<float>(c10::BFloat16(value)));
    default:
      return false;
  }
}

// The largest finite value of `type`, named in the refusal.
float LargestFinite(at::ScalarType type) {
  return type == at::kHalf ? static_cast<float>(std::numeric_limits<c10::Half>::max())
                           : static_cast<float>(std::numeric_limits<c10::BFloat16>::max());
}

at::ScalarType ExportType(const std::string& dtype) {
  return dtype == "bfloat16" ? at::kBFloat16 : dtype == "float16" ? at::kHalf : at::kFloat;
}

std::string ExportDtypeName(at::ScalarType type) {
  return type == at::kBFloat16 ? "bfloat16" : type == at::kHalf ? "float16" : "float32";
}

std::string ManifestPath(const std::string& dir) {
  return absl::StrCat(dir, "/", kCheckpointManifestFile);
}

// The field at `key` ("train_state.step") of the "state" of step folder `dir`'s manifest.
template <typename T>
absl::StatusOr<T> StateField(const nlohmann::json& state, const std::string& dir,
                             absl::string_view key, std::optional<T> if_absent = std::nullopt) {
  return SavedJsonField<T>(state, ManifestPath(dir), "state", key, std::move(if_absent));
}

// What an HF export copies of the run's tokenizer, as convert_checkpoint --tokenizer_dir copies a
// folder's tokenizer files: `tokenizer`'s folder, or the folder of the tokenizer.json file it names
// (read from there beside it) with that file as tokenizer.json. Tiktoken ranks anywhere but a
// folder's tokenizer.model, which convert_checkpoint refuses too, leave it without one (logged).
HfExportOptions ExportTokenizer(const std::string& tokenizer, const std::string& export_dir) {
  HfExportOptions options;
  if (!IsDirectory(tokenizer) && IsTokenizerJsonName(tokenizer)) {
    options.tokenizer_dir = Dirname(tokenizer);
    options.tokenizer_json = tokenizer;
  } else if (PathExists(tokenizer + "/tokenizer.json") ||
             PathExists(tokenizer + "/tokenizer.model")) {
    options.tokenizer_dir = tokenizer;
  } else {
    const bool folder = IsDirectory(tokenizer);
    LOG(WARNING)
        << export_dir << " holds no tokenizer: " << tokenizer
        << (folder ? " keeps its tiktoken ranks in original/tokenizer.model"
                   : " is a tiktoken rank file")
        << "; an export copies only tokenizer files at a folder's top level "
           "(tokenizer.json, tokenizer.model, ...), and convert_checkpoint --tokenizer_dir="
        << tokenizer << " refuses it " << (folder ? "for holding none" : "as not a directory");
  }
  return options;
}

}  // namespace

absl::Status RefuseNonFiniteWeights(const std::vector<ParamRef>& params,
                                    const DistributedRuntime& runtime, absl::string_view where,
                                    at::ScalarType saved_as) {
  const std::vector<float> largest = LargestMagnitudes(params);
  const auto past = std::find_if(largest.begin(), largest.end(),
                                 [saved_as](float value) { return RoundsToInf(value, saved_as); });
  // One agreement for both checks: the worst verdict of any rank (2 non-finite, 1 past range).
  const bool finite =
      std::all_of(largest.begin(), largest.end(), [](float value) { return std::isfinite(value); });
  TITAN_ASSIGN_OR_RETURN(const int64_t verdict, runtime.WorldMax(!finite                 ? 2
                                                                 : past != largest.end() ? 1
                                                                                         : 0));
  if (verdict == 2) {
    return absl::InternalError(absl::StrCat(
        where,
        ": the weights are not finite (NaN or inf): an update overflowed; stopped without saving "
        "them (a checkpoint saved before, if any, is the last good one): lower the learning rate "
        "or weight_decay"));
  }
  if (verdict == 0) return absl::OkStatus();
  const std::string weight = past == largest.end()
                                 ? std::string("a weight of another rank")
                                 : absl::StrCat("weight ", params[past - largest.begin()].name,
                                                " (max |value| ", *past, ")");
  return absl::FailedPreconditionError(absl::StrCat(
      where, ": ", weight, " is past ", ExportDtypeName(saved_as), "'s largest value ",
      LargestFinite(saved_as),
      " and would be saved as inf; stopped without saving (a checkpoint saved before, if any, is "
      "the last good one): set [checkpoint] export_dtype = ",
      saved_as == at::kHalf ? "\"bfloat16\" or \"float32\"" : "\"float32\""));
}

absl::Status RecoverInterruptedRunsOf(const CheckpointManager& manager,
                                      const DistributedRuntime& runtime) {
  const absl::Status undone = manager.RecoverInterruptedRuns();
  TITAN_ASSIGN_OR_RETURN(const bool all_undone, runtime.AllAgree(undone.ok()));
  TITAN_RETURN_IF_ERROR(undone);
  if (!all_undone) return absl::InternalError("rank 0 failed to put back set-aside steps");
  return absl::OkStatus();
}

// The step a resume loads: [checkpoint] load_step, else the newest; -1: none.
absl::StatusOr<int64_t> StepToResume(const JobConfig& config, const CheckpointManager& manager) {
  if (config.checkpoint().load_step() >= 0) return config.checkpoint().load_step();
  absl::StatusOr<int64_t> latest = manager.LatestStep();
  if (absl::IsNotFound(latest.status())) return -1;
  return latest;
}

absl::StatusOr<ResumeChoice> ChooseStepToResume(const JobConfig& config,
                                                const DistributedRuntime& runtime,
                                                const CheckpointManager& manager, bool read_only) {
  if (!read_only) TITAN_RETURN_IF_ERROR(RecoverInterruptedRunsOf(manager, runtime));
  ResumeChoice chosen;
  TITAN_ASSIGN_OR_RETURN(chosen.step, StepToResume(config, manager));
  if (chosen.step < 0) return chosen;
  chosen.dir = manager.StepDirectory(chosen.step);
  if (config.checkpoint().load_step() >= 0) {
    // Refused before the model is built: the initial load is not what the run asked for.
    absl::StatusOr<std::unique_ptr<CheckpointStep>> opened =
        CheckpointStep::Open(chosen.dir, chosen.step);
    if (!opened.ok()) {
      return absl::Status(
          opened.status().code(),
          absl::StrCat("[checkpoint] load_step = ", chosen.step, ": ", opened.status().message()));
    }
    chosen.manifest = *std::move(opened);
  }
  return chosen;
}

absl::Status AdoptRecordedSeed(const JobConfig& config, ResumeChoice& chosen, RunSetup& setup) {
  if (config.training().seed() >= 0 || chosen.step < 0) return absl::OkStatus();
  if (chosen.manifest == nullptr) {
    TITAN_ASSIGN_OR_RETURN(chosen.manifest, CheckpointStep::Open(chosen.dir, chosen.step));
  }
  TITAN_ASSIGN_OR_RETURN(const int64_t recorded,
                         StateField<int64_t>(chosen.manifest->state(), chosen.dir, "seed", -1));
  if (recorded < 0) {
    LOG(WARNING) << ManifestPath(chosen.dir) << " records no seed: [training] seed = -1 drew "
                 << setup.seed << " for this run, so what the seed decides (titan_rl's frozen "
                 << "reference without [checkpoint] initial_load_path, its prompt order) is not "
                 << "the saved run's; set [training] seed to keep it";
    return absl::OkStatus();
  }
  setup.seed = recorded;
  at::manual_seed(setup.seed);
  LOG(INFO) << "[training] seed = -1: using seed " << setup.seed << ", which the run that saved "
            << chosen.dir << " drew";
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TrainCheckpointer>> TrainCheckpointer::Create(
    const JobConfig& config, const DistributedRuntime& runtime,
    std::unique_ptr<CheckpointManager> manager, CheckpointedParts parts) {
  // The names are the schema's choices, checked by ValidateJobConfig.
  absl::flat_hash_set<std::string> excluded(config.checkpoint().exclude_from_loading().begin(),
                                            config.checkpoint().exclude_from_loading().end());
  return std::unique_ptr<TrainCheckpointer>(
      new TrainCheckpointer(config, runtime, std::move(manager), parts, std::move(excluded)));
}

TrainCheckpointer::TrainCheckpointer(const JobConfig& config, const DistributedRuntime& runtime,
                                     std::unique_ptr<CheckpointManager> manager,
                                     CheckpointedParts parts,
                                     absl::flat_hash_set<std::string> excluded)
    : config_(config),
      runtime_(runtime),
      manager_(std::move(manager)),
      parts_(parts),
      excluded_(std::move(excluded)),
      run_config_toml_(JobConfigToToml(config)) {
  const std::string& async_mode = config.checkpoint().async_mode();
  if (async_mode != "disabled") {
    async_saver_ = std::make_unique<AsyncCheckpointSaver>(
        manager_.get(), /*write_duty_cycle=*/0.25,
        async_mode == "async_with_pinned_mem" ? CheckpointStaging::kReusedPinnedBuffers
                                              : CheckpointStaging::kCopyPerSave);
  }
}

TrainCheckpointer::~TrainCheckpointer() = default;

NamedTensors TrainCheckpointer::ModelState() const { return DetachedParams(*parts_.params); }

absl::Status TrainCheckpointer::RecoverInterruptedRuns() const {
  return RecoverInterruptedRunsOf(*manager_, runtime_);
}

absl::Status TrainCheckpointer::EnforceKeepLatest() const {
  // The run's first save sets the loaded run's steps aside, not its keep_latest_k. With nothing
  // to train no save comes: they stay the folder's steps, trimmed as on any rerun.
  const bool first_save_sets_aside =
      set_aside_at_first_save_ && resumed_step_ < config_.training().steps();
  if (parts_.read_only || first_save_sets_aside) return absl::OkStatus();
  // Every rank has loaded its step before rank 0 deletes any.
  TITAN_RETURN_IF_ERROR(runtime_.AllAgree(true).status());
  // As after a save: a step that stays costs only disk, and the run goes on.
  if (const absl::Status trimmed = manager_->EnforceKeepLatest(loaded_step_); !trimmed.ok()) {
    LOG(WARNING) << "keep_latest_k=" << config_.checkpoint().keep_latest_k() << ": could not trim "
                 << manager_->root() << ": " << trimmed;
  }
  return absl::OkStatus();
}

absl::Status TrainCheckpointer::Resume(TrainState& state, ResumeChoice chosen,
                                       const TrainCheckpointer* paired) {
  // ChooseStepToResume undid this folder's interrupted restarts; the pair's are undone too before
  // its steps are compared.
  if (!parts_.read_only && paired != nullptr) {
    TITAN_RETURN_IF_ERROR(paired->RecoverInterruptedRuns());
  }
  int64_t step = chosen.step;
  if (step < 0) return absl::OkStatus();
  // A step 0 may be a seed checkpoint: the policy's weights alone.
  if (paired != nullptr && step > 0) {
    TITAN_ASSIGN_OR_RETURN(step, PairedStep(step, *paired));
  }
  absl::Status loaded =
      LoadStep(step, state, step == chosen.step ? std::move(chosen.manifest) : nullptr);
  // A step the user named: the refusal names the key (and so where it was set).
  if (!loaded.ok() && config_.checkpoint().load_step() >= 0 &&
      !absl::StartsWith(loaded.message(), "[")) {
    return absl::Status(loaded.code(),
                        absl::StrCat("[checkpoint] load_step = ", step, ": ", loaded.message()));
  }
  if (loaded.ok() && step > 0 && runtime_.rank() == 0 && !parts_.read_only) {
    LogKeysChangedSinceSavedRun(step, /*trains=*/state.step < config_.training().steps());
  }
  return loaded;
}

void TrainCheckpointer::LogKeysChangedSinceSavedRun(int64_t step, bool trains) const {
  std::string earlier = saved_run_config_;
  std::string since = absl::StrCat(loaded_dir_, " was saved");
  if (earlier.empty()) {
    // A step saved before steps recorded their run's configuration: the folder's last run wrote
    // its own in config.toml; a missing one says nothing.
    const std::string path = config_.job().dump_folder() + "/config.toml";
    absl::StatusOr<std::string> last_run = ReadFile(path);
    if (!last_run.ok()) return;
    earlier = *std::move(last_run);
    since = absl::StrCat(path, " (the folder's last run)");
  }
  const std::vector<std::string> changed = KeysChangedSince(earlier, config_);
  if (changed.empty()) return;
  const std::string keys = absl::StrJoin(changed, ", ");
  if (!trains) {
    // No step runs, so no final save either: its keys (last_save_in_hf, ...) are not applied.
    LOG(WARNING) << "resuming step " << step << " with keys changed since " << since << ": " << keys
                 << "; nothing is left to train ([training] steps = " << config_.training().steps()
                 << "), so no step is trained and no final save or "
                 << "export is written (" << loaded_dir_ << " stays as saved; convert_checkpoint "
                 << "--from=titan --to=hf exports its weights)";
    return;
  }
  // torchtitan restores the optimizer's saved hyperparameters; here every key does what it says.
  LOG(WARNING) << "resuming step " << step << " with keys changed since " << since << ": " << keys
               << "; the new values apply";
}

absl::StatusOr<int64_t> TrainCheckpointer::PairedStep(int64_t step,
                                                      const TrainCheckpointer& paired) const {
  TITAN_ASSIGN_OR_RETURN(const std::vector<int64_t> held, paired.manager_->ListSteps());
  const auto holds = [&](int64_t s) { return std::binary_search(held.begin(), held.end(), s); };
  if (holds(step)) return step;
  const std::string missing = paired.manager_->StepDirectory(step);
  if (config_.checkpoint().load_step() >= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[checkpoint] load_step = ", step, ": ", missing, " is missing, so ",
        manager_->StepDirectory(step), " cannot resume whole; choose a step both folders hold"));
  }
  TITAN_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, manager_->ListSteps());
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it >= step || !holds(*it)) continue;
    // A save that died between the two: the newest whole step is the last good checkpoint.
    LOG(WARNING) << missing << " is missing (a save interrupted before it was complete?): "
                 << "resuming step-" << *it << ", the newest step saved whole";
    if (!parts_.read_only) {
      TITAN_RETURN_IF_ERROR(
          manager_->SetAsideStepsAfter(*it, absl::StrCat("no ", missing, " beside it")).status());
    }
    return *it;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      missing, " is missing and no earlier step of ", manager_->root(), " has its pair in ",
      paired.manager_->root(), ", so no step resumes whole; to start afresh, move ",
      manager_->root(), " away"));
}

absl::Status TrainCheckpointer::ResumeAt(int64_t step, TrainState& state) {
  // The pair's Resume has recovered this folder's interrupted runs already.
  if (!parts_.read_only) {
    // Newer steps were saved for steps that the run now redoes.
    const std::string why =
        step < 0 ? "the run resumes no step" : absl::StrCat("newer than the resumed step ", step);
    TITAN_RETURN_IF_ERROR(manager_->SetAsideStepsAfter(step, why).status());
  }
  if (step < 0 || (step == 0 && !PathExists(manager_->StepDirectory(step)))) {
    return absl::OkStatus();
  }
  return LoadStep(step, state);
}

absl::Status TrainCheckpointer::LoadStep(int64_t step, TrainState& state,
                                         std::unique_ptr<CheckpointStep> manifest) {
  loaded_step_ = step;
  const std::string dir = manager_->StepDirectory(step);
  if (manifest == nullptr) {
    TITAN_ASSIGN_OR_RETURN(manifest, CheckpointStep::Open(dir, step));
  }
  TITAN_ASSIGN_OR_RETURN(saved_run_config_,
                         StateField<std::string>(manifest->state(), dir, "run_config", ""));
  // Another model's step is refused in one line, before any tensor is matched by name.
  if (manifest->state().contains("model")) {
    TITAN_ASSIGN_OR_RETURN(
        const ModelInfo held,
        ModelInfoFromJson(manifest->state().at("model"), ManifestPath(dir) + ": state.model"));
    TITAN_RETURN_IF_ERROR(CheckSameParameters(held, *parts_.model, dir));
    // Shapes alike, the same weights under another rope_theta or norm_eps are another model.
    const std::string differences = ArchitectureDifferences(held.args, parts_.model->args);
    if (!differences.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": saved by ", DescribeModelInfo(held), ", but this run's model is ",
          DescribeModelInfo(*parts_.model), " (", differences,
          "); resume with the saved settings, or start a new run from this step with [checkpoint] "
          "initial_load_path in another [job] dump_folder"));
    }
  }
  std::vector<std::string> excluded(excluded_.begin(), excluded_.end());
  std::sort(excluded.begin(), excluded.end());
  TITAN_ASSIGN_OR_RETURN(
      const std::vector<std::string> saved_exclusions,
      StateField<std::vector<std::string>>(manifest->state(), dir, "timeline_exclusions",
                                           std::vector<std::string>()));
  if (!excluded.empty() && saved_exclusions == excluded) {
    // A step of the timeline these exclusions started: rerunning the same job resumes it.
    LOG(INFO) << dir << " was saved by the run that started from another with exclude_from_loading "
              << "= [" << absl::StrJoin(excluded, ", ") << "]: resuming it whole";
    excluded_.clear();
  }
  // Exclusions start a new timeline; without them this run continues the saved one's.
  timeline_exclusions_ = excluded.empty() ? saved_exclusions : excluded;
  TensorBoxes boxes;
  const NamedTensors model = parts_.sharded->CheckpointPieces(ModelState(), boxes);
  // A pipeline stage loads its part of the model.
  const bool partial = runtime_.dims().pp_enabled();
  if (manifest->model_only()) {
    loaded_model_only_ = true;
    if (parts_.weights_only) {
      TITAN_RETURN_IF_ERROR(manager_->LoadInto(step, model, nullptr, nullptr, boxes,
                                               /*verify_checksums=*/true, partial));
      LOG(INFO) << "loaded model weights from " << dir;
      loaded_dir_ = dir;
      return absl::OkStatus();
    }
    // A finished run's final save: rerunning the job has nothing left to train. Not with
    // train_state excluded (this run would train from step 0), nor for a read-only tool.
    const bool finished = step >= config_.training().steps() && !parts_.read_only &&
                          !excluded_.contains("train_state");
    if (step != 0 && finished) {
      TITAN_RETURN_IF_ERROR(manager_->LoadInto(step, model, nullptr, nullptr, boxes,
                                               /*verify_checksums=*/true, partial));
      LOG(INFO) << "loaded model weights from " << dir << ", the final save of a finished run";
      state.step = step;
      state.lr_step = step;
      resumed_step_ = step;
      loaded_dir_ = dir;
      return SetAsideNewerSteps(step);
    }
    if (step != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir,
                       " holds model weights only (a last_save_model_only export), so training "
                       "cannot resume from it; to train on from these weights start a new run with "
                       "[checkpoint] initial_load_path=",
                       dir,
                       " in another [job] dump_folder, or resume an earlier full step with "
                       "[checkpoint] load_step"));
    }
    // torchtitan's seed checkpoint: weights only, training starts at step 0.
    TITAN_RETURN_IF_ERROR(
        manager_->LoadInto(step, model, nullptr, nullptr, boxes, /*verify_checksums=*/true, partial));
    LOG(INFO) << "loaded model weights from seed checkpoint " << dir << "; training starts at 0";
    loaded_dir_ = dir;
    return SetAsideNewerSteps(step);
  }
  // The optimizer's zero state gives LoadInto tensors of the right shapes to fill in place. Each
  // rank reads the rows it holds from whichever saved pieces overlap them.
  const bool load_optimizer = !excluded_.contains("optimizer");
  parts_.optimizer->InitState();
  NamedTensors optimizer_state = parts_.optimizer->StateDict();
  const NamedTensors optimizer = parts_.sharded->CheckpointPieces(optimizer_state, boxes);
  nlohmann::json extra;
  TITAN_RETURN_IF_ERROR(
      manager_->LoadInto(step, model, load_optimizer ? &optimizer : nullptr, &extra, boxes,
                         /*verify_checksums=*/true, partial));
  if (!excluded_.contains("train_state")) TITAN_RETURN_IF_ERROR(CheckRunKind(dir, extra));
  if (load_optimizer) TITAN_RETURN_IF_ERROR(parts_.optimizer->LoadStateDict(optimizer_state));
  if (parts_.data != nullptr && !excluded_.contains("dataloader")) {
    TITAN_ASSIGN_OR_RETURN(const nlohmann::json data_state,
                           StateField<nlohmann::json>(extra, dir, "dataloader"));
    if (absl::Status loaded = parts_.data->LoadStateDict(data_state); !loaded.ok()) {
      return absl::Status(
          loaded.code(), absl::StrCat(dir, ": ", loaded.message(),
                                      "; to read the data from its start instead, add [checkpoint] "
                                      "exclude_from_loading = [\"dataloader\"]"));
    }
  }
  if (!excluded_.contains("train_state")) {
    TITAN_ASSIGN_OR_RETURN(state.step, StateField<int64_t>(extra, dir, "train_state.step"));
    TITAN_ASSIGN_OR_RETURN(state.ntokens_seen,
                           StateField<int64_t>(extra, dir, "train_state.ntokens_seen"));
  }
  // The schedule follows the step count: restarted with it, it cannot run ahead of the steps
  // left (which would end the decay early).
  if (!excluded_.contains("lr_scheduler") && !excluded_.contains("train_state")) {
    TITAN_ASSIGN_OR_RETURN(state.lr_step,
                           StateField<int64_t>(extra, dir, "lr_scheduler.last_step"));
  }
  if (!excluded_.contains("rng")) {
    TITAN_ASSIGN_OR_RETURN(const nlohmann::json rng, StateField<nlohmann::json>(extra, dir, "rng"));
    if (absl::Status restored = RestoreRngState(rng); !restored.ok()) {
      return absl::Status(restored.code(),
                          absl::StrCat(ManifestPath(dir), ": state.", restored.message()));
    }
  }
  resumed_step_ = state.step;
  loaded_dir_ = dir;
  if (excluded_.contains("train_state") && step > 0) {
    // Set aside only then: a run that dies before it saves must find the step it loaded again.
    set_aside_at_first_save_ = true;
    LOG(INFO) << "train_state not loaded: this run counts from step 0; the steps of the run it "
                 "loaded are set aside when it first saves";
  }
  LOG(INFO) << "resumed from checkpoint step-" << step
            << (excluded_.empty() ? ""
                                  : absl::StrCat(" (not loaded: ", absl::StrJoin(excluded_, ", "),
                                                 ")"));
  return SetAsideNewerSteps(step);
}

absl::Status TrainCheckpointer::CheckRunKind(const std::string& dir,
                                             const nlohmann::json& extra) const {
  // Steps saved before the kind was recorded are titan_train's (titan_rl's lack "dataloader").
  TITAN_ASSIGN_OR_RETURN(const std::string saved,
                         StateField<std::string>(extra, dir, "run_kind",
                                                 extra.contains("dataloader") ? "train" : "rl"));
  if (saved == parts_.run_kind || (saved == "rl" && absl::StartsWith(parts_.run_kind, "rl/"))) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      dir, " was saved by a ", saved, " run, so this ", parts_.run_kind,
      " run cannot resume it; to start from its weights use a new [job] dump_folder with "
      "[checkpoint] initial_load_path=",
      dir,
      " (or load only its weights here with [checkpoint] "
      "exclude_from_loading = [\"train_state\", \"optimizer\", \"dataloader\"])"));
}

absl::Status TrainCheckpointer::SetAsideNewerSteps(int64_t step) const {
  // Only an explicit load_step can resume from before the newest step.
  if (config_.checkpoint().load_step() < 0 || parts_.read_only) return absl::OkStatus();
  if (step >= config_.training().steps()) {
    TITAN_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, manager_->ListSteps());
    if (!steps.empty() && steps.back() > step) {
      return absl::InvalidArgumentError(
          absl::StrCat("[checkpoint] load_step = ", step, " with [training] steps = ",
                       config_.training().steps(), ": nothing would train, yet the steps after ",
                       step, " would be set aside; raise [training] steps, or drop load_step"));
    }
  }
  return manager_
      ->SetAsideStepsAfter(
          step, absl::StrCat("newer than load_step ", step, ", which this run resumed from"))
      .status();
}

NamedTensors TrainCheckpointer::PiecesToSave(const NamedTensors& local, TensorBoxes& boxes) const {
  const MeshCoordinates at = runtime_.dims().CoordinatesOf(runtime_.rank());
  const bool first_replica = at.dp_replicate == 0;
  // One rank per pipeline stage (its stage's whole tensors; every rank without pipelining).
  const bool whole_writer = first_replica && at.dp_shard == 0 && at.cp == 0 && at.tp == 0;
  NamedTensors kept;
  for (auto& [name, tensor] : parts_.sharded->CheckpointPieces(local, boxes)) {
    const bool piece = boxes.count(name) > 0;
    if (piece ? first_replica && parts_.sharded->WritesPiece(name) : whole_writer) {
      kept.emplace_back(name, tensor);
    }
  }
  return kept;
}

absl::Status TrainCheckpointer::FinishPendingSave() {
  if (async_saver_ == nullptr || !async_saver_->in_flight()) return absl::OkStatus();
  const absl::Status saved = async_saver_->Wait();
  TITAN_ASSIGN_OR_RETURN(const bool all_saved, runtime_.AllAgree(saved.ok()));
  if (!all_saved) DiscardFailedSave(pending_step_, /*model_only=*/false);
  TITAN_RETURN_IF_ERROR(saved);
  if (!all_saved) return absl::InternalError("another rank failed to write its checkpoint part");
  return FinishRestart();
}

void TrainCheckpointer::DiscardFailedSave(int64_t step, bool model_only) const {
  const absl::Status discarded = manager_->DiscardFailedSave(step);
  // The save's own error is the one to report; the next run removes what is left anyway.
  if (!discarded.ok()) LOG(WARNING) << "Keeping a failed save's temporary: " << discarded;
  if (!model_only || !writer() || !config_.checkpoint().last_save_in_hf()) return;
  // The export is half of the final save: without its step it goes too.
  const std::string export_dir = manager_->HfExportDirectory(step);
  if (!PathExists(export_dir)) return;
  if (const absl::Status removed = RemoveTree(export_dir); !removed.ok()) {
    LOG(WARNING) << "Keeping " << export_dir << ", the export of a failed save: " << removed;
  } else {
    LOG(INFO) << "Removed " << export_dir << ", the export of the failed save of step " << step;
  }
}

absl::Status TrainCheckpointer::FinishRestart() {
  if (!restart_saving_) return absl::OkStatus();
  restart_saving_ = false;
  TITAN_RETURN_IF_ERROR(manager_->FinishRestart());
  for (const auto& on_set_aside : on_set_aside_) TITAN_RETURN_IF_ERROR(on_set_aside());
  return absl::OkStatus();
}

absl::Status TrainCheckpointer::Save(const TrainState& train, bool model_only) {
  TITAN_RETURN_IF_ERROR(FinishPendingSave());
  // Full saves keep the weights' float32 to resume; the model-only one is in export_dtype.
  const at::ScalarType type =
      model_only ? ExportType(config_.checkpoint().export_dtype()) : at::kFloat;
  // An update can overflow with a finite gradient norm (a huge lr or weight decay), and a weight
  // can be past export_dtype's range: such weights must not replace the last good step.
  TITAN_RETURN_IF_ERROR(
      RefuseNonFiniteWeights(*parts_.params, runtime_, absl::StrCat("step ", train.step), type));
  if (set_aside_at_first_save_) {
    // Otherwise keep_latest_k deletes this run's saves for the old run's newer ones, and a resume
    // takes the old timeline's newest step. Journaled until this save is committed.
    TITAN_RETURN_IF_ERROR(
        manager_
            ->SetAsideForRestart(train.step,
                                 "saved by the run this one loaded with exclude_from_loading "
                                 "= [\"train_state\"] (it counts from step 0)")
            .status());
    set_aside_at_first_save_ = false;
    restart_saving_ = true;
  }
  CheckpointState state;
  absl::Status exported;
  std::optional<ScopedCollectiveTimeout> wait_for_writer;
  if (model_only) {
    // A consolidated export: whole tensors, gathered and written by rank 0 in export_dtype. Each
    // leaves the device as it arrives, so a model larger than one GPU's memory exports.
    // Until the agreement below, the other ranks wait while rank 0 copies and writes it all.
    wait_for_writer.emplace(runtime_,
                            OneWriterTimeout(config_, parts_.num_params * c10::elementSize(type)));
    TITAN_RETURN_IF_ERROR(parts_.sharded->GatherFull(
        ModelState(), [&](const std::string& name, const at::Tensor& whole) {
          if (writer()) state.model.emplace_back(name, whole.to(at::kCPU, type));
          return absl::OkStatus();
        }));
    if (writer() && config_.checkpoint().last_save_in_hf()) {
      exported = ExportHf(train.step, state.model);
    }
  } else {
    // Every rank writes its own shards, in parallel (CheckpointManager joins them on load).
    state.model = PiecesToSave(ModelState(), state.boxes);
    // A run that has not stepped yet (RL's dynamic sampling can drop every group) still saves
    // the zero state that Resume loads into.
    parts_.optimizer->InitState();
    state.optimizer = PiecesToSave(parts_.optimizer->StateDict(), state.boxes);
    if (parts_.data != nullptr) state.extra["dataloader"] = parts_.data->StateDict();
    state.extra["train_state"] = {{"step", train.step}, {"ntokens_seen", train.ntokens_seen}};
    state.extra["lr_scheduler"] = {{"last_step", train.lr_step}};
    state.extra["rng"] = CaptureRngState();
    state.extra["run_kind"] = parts_.run_kind;
    state.extra["timeline_exclusions"] = timeline_exclusions_;
  }
  // The shape travels with the weights, so convert_checkpoint and checkpoint_inspect need no
  // flavor.
  state.extra["model"] = ModelInfoToJson(*parts_.model);
  // What a resume of this step compares its own configuration with.
  state.extra["run_config"] = run_config_toml_;
  if (parts_.seed >= 0) state.extra["seed"] = parts_.seed;
  // The final export is written at once: nothing is left to overlap it with, and staging would
  // hold a second host copy of the model. A failed export skips the save; the agreement below (on
  // every rank's single one for this save) still tells the other ranks.
  if (async_saver_ != nullptr && !model_only && exported.ok()) {
    pending_step_ = train.step;
    return async_saver_->Start(train.step, state, model_only);
  }
  // CheckpointManager logs the save (path, tensors, bytes, seconds).
  const absl::Status saved =
      exported.ok() ? manager_->Save(train.step, state, model_only) : exported;
  // Also a barrier: no rank runs ahead (or resumes) before the step is committed.
  TITAN_ASSIGN_OR_RETURN(const bool all_saved, runtime_.AllAgree(saved.ok()));
  if (!all_saved) DiscardFailedSave(train.step, model_only);
  TITAN_RETURN_IF_ERROR(saved);
  if (!all_saved) {
    return absl::InternalError(absl::StrCat("another rank failed to save step-", train.step));
  }
  return FinishRestart();
}

absl::Status TrainCheckpointer::ExportHf(int64_t step, const NamedTensors& model) const {
  const std::string dir = manager_->HfExportDirectory(step);
  // transformers loads the export with its tokenizer.
  const HfExportOptions options = ExportTokenizer(TokenizerPath(config_), dir);
  // An export of this step by an earlier run of this timeline (other timelines' are set aside
  // with their steps) is replaced.
  if (PathExists(dir)) LOG(WARNING) << "replacing " << dir << ", an earlier export of this step";
  TITAN_RETURN_IF_ERROR(RemoveTree(dir));
  TITAN_RETURN_IF_ERROR(
      SaveHfExport(model, *parts_.model, model.front().second.scalar_type(), dir, options));
  LOG(INFO) << "exported Hugging Face weights to " << dir;
  return absl::OkStatus();
}

StepLogStart LogStart(const TrainCheckpointer* checkpointer, const RunSetup& setup) {
  StepLogStart start;
  start.restart = checkpointer != nullptr && checkpointer->restart_pending();
  if (checkpointer != nullptr && !start.restart) start.resumed_step = checkpointer->resumed_step();
  start.run_id = setup.run_id;
  return start;
}

absl::StatusOr<std::unique_ptr<MetricsLogger>> BuildResumedMetrics(
    const JobConfig& config, const DistributedRuntime& runtime, const RunSetup& setup,
    TrainCheckpointer* checkpointer) {
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<MetricsLogger> metrics,
                         BuildMetrics(config, runtime, LogStart(checkpointer, setup)));
  if (checkpointer && metrics) {
    checkpointer->OnSetAside([logger = metrics.get()] { return logger->CommitRestart(); });
  }
  return metrics;
}

}  // namespace titan
