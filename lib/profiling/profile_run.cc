#include "lib/profiling/profile_run.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/distributed/distributed_env.h"
#include "lib/profiling/memory_tracker.h"
#include "lib/profiling/profile_report.h"
#include "lib/profiling/step_profiler.h"
#include "lib/profiling/trace_analysis.h"
#include "lib/train/components.h"
#include "lib/train/device.h"
#include "lib/train/stop_signal.h"
#include "lib/train/trainer.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_context.h"
#include "lib/util/status_macros.h"
#include "lib/util/torch_errors.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

// Memory timeline points kept per rank (each the highest of its time slice).
constexpr size_t kMemorySamples = 800;
// Rows of ops_rank<r>.txt.
constexpr size_t kOpTableRows = 40;

// profile_run loads a checkpoint's weights ([checkpoint] initial_load_*), and saves and resumes
// none: every other [checkpoint] key would do nothing.
bool IsUnreadCheckpointKey(absl::string_view key) {
  return !absl::StartsWith(key, "initial_load_");
}

// The unread [checkpoint] keys `config` sets to other than their defaults, as ChangedKey lines
// ("[checkpoint] interval = 10"), with where each was set (KeySource's; "" where unknown).
std::vector<std::pair<std::string, std::string>> ChangedUnreadCheckpointKeys(
    const JobConfig& config) {
  std::vector<std::pair<std::string, std::string>> changed;
  const google::protobuf::Descriptor* section = JobConfig::Checkpoint::descriptor();
  for (int i = 0; i < section->field_count(); ++i) {
    const std::string& key = section->field(i)->name();
    if (!IsUnreadCheckpointKey(key)) continue;
    std::optional<std::string> line = ChangedKey(config, "checkpoint", key);
    if (!line.has_value()) continue;
    changed.emplace_back(*std::move(line), KeySource("checkpoint", key).value_or(""));
  }
  return changed;
}

}  // namespace

absl::Status CheckCheckpointKeys(const JobConfig& config) {
  std::vector<std::string> refused;
  for (const auto& [line, source] : ChangedUnreadCheckpointKeys(config)) {
    if (absl::StartsWith(source, "--")) refused.push_back(source);
  }
  // Skipped is not ignored: a job file's value titan_train refuses is refused here too.
  if (refused.empty()) return ValidateCheckpointConfig(config);
  return absl::InvalidArgumentError(absl::StrCat(
      absl::StrJoin(refused, ", "),
      ": profile_run saves and resumes no checkpoint, so [checkpoint] keys other than "
      "initial_load_* do nothing there; drop them (--checkpoint.initial_load_path profiles from a "
      "checkpoint's weights)"));
}

// The saving and resuming checkpoint keys go to their defaults, which enable = false requires;
// [profiling] and [validation] at their defaults (off): config.toml records no schedule that did
// not run, and runs again.
JobConfig ProfiledJobConfig(JobConfig config, const ProfileRunOptions& options) {
  config.mutable_job()->set_dump_folder(options.out);
  // The job file's (its flags are refused by CheckCheckpointKeys), said once.
  const absl::StatusOr<DistributedEnv> env = DetectDistributedEnv();
  if (env.ok() && env->rank == 0) {
    std::vector<std::string> skipped;
    for (const auto& [line, source] : ChangedUnreadCheckpointKeys(config)) {
      // "[checkpoint] enable = true, interval = 10"
      skipped.emplace_back(skipped.empty() ? line : absl::StripPrefix(line, "[checkpoint] "));
    }
    if (!skipped.empty()) {
      LOG(INFO) << absl::StrJoin(skipped, ", ")
                << ": profile_run saves and resumes no checkpoint, so these are skipped "
                   "([checkpoint] initial_load_path still loads weights)";
    }
  }
  JobConfig::Checkpoint checkpoint = DefaultJobConfig().checkpoint();
  checkpoint.set_enable(false);
  checkpoint.set_initial_load_path(config.checkpoint().initial_load_path());
  checkpoint.set_initial_load_model_only(config.checkpoint().initial_load_model_only());
  checkpoint.set_initial_load_in_hf(config.checkpoint().initial_load_in_hf());
  *config.mutable_checkpoint() = std::move(checkpoint);
  config.mutable_metrics()->set_enable_tensorboard(false);
  config.clear_profiling();
  // Training steps only, so that validation's forwards are not in the profile.
  if (config.validation().enable() && env.ok() && env->rank == 0) {
    LOG(INFO) << "[validation] enable = true: profile_run skips validation (titan_train would "
                 "run it every [validation] freq = "
              << config.validation().freq() << " steps); it profiles the training steps only";
  }
  config.clear_validation();
  // Under --out, an absolute folder too: the job's own dumps are never moved or added to.
  config.mutable_comm()->set_save_traces_folder(DefaultJobConfig().comm().save_traces_folder());
  return config;
}

absl::Status AsOutFlag(const absl::Status& status) {
  absl::string_view message = status.message();
  // Where the job set the key, which WithKeySource put first, is moot: --out replaced it.
  if (const std::optional<std::string> source = KeySource("job", "dump_folder")) {
    absl::ConsumePrefix(&message, absl::StrCat(*source, ": "));
  }
  if (!absl::ConsumePrefix(&message, "[job] dump_folder")) return status;
  return absl::Status(status.code(), absl::StrCat("--out", message));
}

namespace {

// `name` is <prefix><r><suffix>, a rank spelled as profile_run writes it (RankInName).
bool IsRankFile(absl::string_view name, absl::string_view prefix, absl::string_view suffix) {
  return RankInName(name, prefix, suffix).has_value();
}

// A trace, by name: trace_rank<r>.json[.gz] (in <out>/traces; an earlier version wrote them into
// <out> itself).
bool IsTrace(absl::string_view name) {
  return IsRankFile(name, "trace_rank", ".json") || IsRankFile(name, "trace_rank", ".json.gz");
}

// A per-rank file profile_run writes into --out, by name: ops_rank<r>.txt/.json,
// profile_rank<r>.json, memory_snapshot_rank<r>.pickle, and an earlier version's traces.
bool IsPerRankOutput(absl::string_view name) {
  return IsTrace(name) || IsRankFile(name, "ops_rank", ".txt") ||
         IsRankFile(name, "ops_rank", ".json") || IsRankFile(name, "profile_rank", ".json") ||
         IsRankFile(name, "memory_snapshot_rank", ".pickle");
}

// The file whose temporary `name` is, that a run stopped while writing left: Kineto's
// <trace>.tmp, or an atomic write's <file>.tmp.<pid>.
std::optional<absl::string_view> TemporaryTarget(absl::string_view name) {
  if (std::optional<absl::string_view> target = AtomicWriteTarget(name)) return target;
  if (absl::ConsumeSuffix(&name, ".tmp")) return name;
  return std::nullopt;
}

// An earlier run's file in --out that this run replaces: a per-rank output, summary.json,
// report.html, or the temporary of one. summary.json and report.html go too: they name the traces
// removed with them, and a run stopped before its end would leave them pointing at none.
bool IsEarlierOutput(absl::string_view name) {
  if (IsPerRankOutput(name) || name == "summary.json" || name == "report.html") return true;
  const std::optional<absl::string_view> file = TemporaryTarget(name);
  return file.has_value() &&
         (IsPerRankOutput(*file) || *file == "summary.json" || *file == "report.html");
}

// An earlier run's file in <out>/traces: a trace or its temporary.
bool IsEarlierTrace(absl::string_view name) {
  if (IsTrace(name)) return true;
  const std::optional<absl::string_view> file = TemporaryTarget(name);
  return file.has_value() && IsTrace(*file);
}

// Removes the regular files of `folder` that `is_earlier` names (links are not followed); a
// missing folder has none. Returns how many were removed.
absl::StatusOr<int> RemoveEarlierFiles(const std::string& folder,
                                       bool (*is_earlier)(absl::string_view)) {
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(folder);
  if (absl::IsNotFound(names.status())) return 0;
  if (!names.ok()) {
    return absl::Status(names.status().code(),
                        absl::StrCat("listing earlier outputs: ", names.status().message()));
  }
  int removed = 0;
  for (const std::string& name : *names) {
    if (!is_earlier(name)) continue;
    const std::string path = absl::StrCat(folder, "/", name);
    struct stat info;
    if (::lstat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) continue;
    if (::unlink(path.c_str()) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoError("remove an earlier run's output", path);
    }
    ++removed;
  }
  return removed;
}

// Removes an earlier run's per-rank outputs, summary.json, report.html and temporaries from `out`
// and its traces folder (it may have had more ranks, or gzip), so that every trace there is this
// run's and HTA finds no other rank's, and a run stopped early leaves no report of another. Other
// files stay.
// Returns how many were removed.
absl::StatusOr<int> RemoveEarlierOutputs(const std::string& out) {
  TITAN_ASSIGN_OR_RETURN(const int in_out, RemoveEarlierFiles(out, IsEarlierOutput));
  TITAN_ASSIGN_OR_RETURN(
      const int in_traces,
      RemoveEarlierFiles(absl::StrCat(out, "/", kProfileTracesFolder), IsEarlierTrace));
  return in_out + in_traces;
}

// Refuses a traces folder under `out` holding an entry profile_run did not write (any but its
// regular trace files and their temporaries), naming one: HTA reads every .json / .gz file there
// as a rank's trace, and the run would leave the entry in place. Moving it away loses nothing.
absl::Status RefuseForeignTraceEntries(const std::string& out) {
  const std::string folder = absl::StrCat(out, "/", kProfileTracesFolder);
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(folder);
  if (absl::IsNotFound(names.status())) return absl::OkStatus();
  TITAN_RETURN_IF_ERROR(WithContext(names.status(), "--out"));
  std::vector<std::string> foreign;
  for (const std::string& name : *names) {
    struct stat info;
    if (::lstat(absl::StrCat(folder, "/", name).c_str(), &info) != 0) {
      if (errno == ENOENT) continue;  // an earlier run's, removed by rank 0 meanwhile
      return ErrnoError("inspect", absl::StrCat(folder, "/", name));
    }
    // A link or folder named like a trace is not one this run replaces.
    if (!S_ISREG(info.st_mode) || !IsEarlierTrace(name)) foreign.push_back(name);
  }
  if (foreign.empty()) return absl::OkStatus();
  std::sort(foreign.begin(), foreign.end());
  const bool one = foreign.size() == 1;
  return absl::FailedPreconditionError(absl::StrCat(
      "--out: ", folder, " holds ", foreign.front(),
      one ? ""
          : absl::StrCat(" and ", foreign.size() - 1,
                         foreign.size() == 2 ? " more entry" : " more entries"),
      ", which profile_run did not write: that folder is for the run's traces alone "
      "(HolisticTraceAnalysis reads every .json and .gz file in it as a rank's trace); move ",
      one ? "it" : "them", " elsewhere, or use another --out"));
}

// Tags the blocks of the trainer's long-lived state at the step phases where it exists.
void TagStateHooks(Trainer& trainer, MemoryTracker& tracker) {
  trainer.hooks().Add(StepPhase::kBeforeOptimizer, [&trainer, &tracker](const StepEvent&) {
    for (const ParamRef& p : trainer.params()) {
      tracker.Tag(*p.tensor, MemoryCategory::kParameters);
      tracker.Tag(p.tensor->grad(), MemoryCategory::kGradients);
    }
    return absl::OkStatus();
  });
  trainer.hooks().Add(StepPhase::kAfterOptimizer, [&trainer, &tracker](const StepEvent&) {
    for (const at::Tensor& tensor : trainer.optimizer().StateTensors()) {
      tracker.Tag(tensor, MemoryCategory::kOptimizerState);
    }
    return absl::OkStatus();
  });
}

ProfileRunInfo RunInfo(const JobConfig& config, const DistributedRuntime& runtime,
                       const Trainer& trainer, const ProfileRunOptions& options) {
  ProfileRunInfo info;
  info.model = absl::StrCat(config.model().name(), " ", config.model().flavor());
  info.device = DeviceName(trainer.setup().device);
  info.world_size = runtime.dims().world_size();
  const ParallelDims& dims = runtime.dims();
  info.parallelism = runtime.distributed()
                         ? absl::StrCat("data parallel: replicate ", dims.dp_replicate(),
                                        " x shard ", dims.dp_shard(), "; tp ", dims.tp(), ", cp ",
                                        dims.cp(), ", pp ", dims.pp())
                         : "one process";
  info.warmup = options.warmup;
  info.active = options.active;
  info.local_batch_size = config.training().local_batch_size();
  info.seq_len = config.training().seq_len();
  info.microbatches = GradientAccumulationSteps(config, trainer.setup());
  info.dp_size = trainer.setup().dp_size;
  return info;
}

// Runs the steps and returns this rank's profile (memory timeline included).
absl::StatusOr<RankProfile> ProfileSteps(Trainer& trainer, const DistributedRuntime& runtime,
                                         MemoryTracker& tracker, const JobConfig& config,
                                         const ProfileRunOptions& options) {
  const int rank = runtime.rank();
  const int64_t first_traced = options.warmup + 1;
  const int64_t last = options.warmup + options.active;
  StepProfilerOptions profiling;
  profiling.enable_profiling = true;
  profiling.traces_folder = absl::StrCat(options.out, "/", kProfileTracesFolder);
  profiling.profile_freq = static_cast<int>(last);
  profiling.warmup = options.warmup;
  profiling.active = options.active;
  profiling.rank = rank;
  profiling.device = trainer.setup().device;
  profiling.enable_memory_snapshot = profiling.device.is_cuda();
  profiling.memory_snapshot_folder = options.out;
  profiling.single_cycle_files = true;
  profiling.gzip_traces = options.gzip;
  profiling.distributed_info = runtime.ProfilerDistributedInfo();
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<StepProfiler> profiler, StepProfiler::Create(profiling));

  MemoryTimeline timeline;
  // These hooks refer to locals: no step runs after this function.
  trainer.hooks().Add(StepPhase::kStepBegin, [&](const StepEvent& event) {
    if (event.step == first_traced) tracker.StartRecording();
    if (event.step >= first_traced) tracker.MarkStep(event.step);
    return profiler->StepBegin(event.step);
  });
  TagStateHooks(trainer, tracker);
  absl::Time work_end;  // the step's work done, before the profiler's own StepEnd
  trainer.hooks().Add(StepPhase::kStepEnd, [&](const StepEvent& event) {
    work_end = absl::Now();
    if (event.step == last) timeline = tracker.StopRecording(kMemorySamples);
    return profiler->StepEnd(event.step);
  });

  // SIGINT/SIGTERM as titan_train takes them: the first is deferred (a second ends the process at
  // once), so a signal never cuts a trace write short. One process stops after the step, with no
  // profile; ranks finish the run (stopping after one step together would take a collective per
  // step, in the trace).
  StopSignal stop(runtime);
  for (int64_t step = 1; step <= last; ++step) {
    if (const int signal = StopSignal::Received(); signal != 0 && !runtime.distributed()) {
      return absl::CancelledError(absl::StrCat("stopped by signal ", signal, " after step ",
                                               step - 1, " of ", last, ": no profile written"));
    }
    const absl::Time begin = absl::Now();
    TITAN_ASSIGN_OR_RETURN(std::vector<Batch> batches, trainer.NextMicrobatches());
    TITAN_ASSIGN_OR_RETURN(const StepResult result,
                           trainer.TrainStep(batches, /*labels_masked=*/false));
    // The last step's profiler stop and trace writing are not step time: logged apart.
    LOG(INFO) << absl::StrFormat(
        "step %d (%s)  loss %.4f  %.0f ms%s", step, step < first_traced ? "warmup" : "traced",
        result.loss, absl::ToDoubleMilliseconds(work_end - begin),
        step == last ? absl::StrFormat(", then %.0f ms stopping the profiler and writing the trace",
                                       absl::ToDoubleMilliseconds(absl::Now() - work_end))
                     : "");
    if (step == 1) {
      runtime.SetTimeout(absl::Seconds(config.comm().train_timeout_seconds()));
      trainer.LogStateMemory();
    }
  }
  const std::string trace = profiler->TracePath(last);
  profiler.reset();
  if (const int signal = StopSignal::Received(); signal != 0) {
    LOG(WARNING) << "signal " << signal << " received: finishing the profile first";
  }

  TITAN_ASSIGN_OR_RETURN(const TraceAnalysis analysis, AnalyzeTraceFile(trace));
  const std::string prefix = absl::StrCat(options.out, "/ops_rank", rank);
  TITAN_RETURN_IF_ERROR(
      WriteFileAtomically(prefix + ".txt", FormatOpTable(analysis, kOpTableRows)));
  TITAN_RETURN_IF_ERROR(WriteFileAtomically(prefix + ".json", OpTableJson(analysis).dump(1)));
  RankProfile profile = MakeRankProfile(
      rank, absl::StrCat(kProfileTracesFolder, trace.substr(trace.rfind('/'))), analysis);
  profile.memory = std::move(timeline);
  TITAN_RETURN_IF_ERROR(
      WriteFileAtomically(absl::StrCat(options.out, "/profile_rank", rank, ".json"),
                          RankProfileToJson(profile).dump(1)));
  return profile;
}

absl::Status Run(const JobConfig& config, const DistributedRuntime& runtime,
                 const ProfileRunOptions& options) {
  if (options.warmup < 0 || options.active < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--profile.warmup=", options.warmup,
                                                   " --profile.active=", options.active,
                                                   ": expected warmup >= 0 and active >= 1"));
  }
  // In int64: a huge warmup must not wrap the sum negative and pass.
  const int64_t steps = int64_t{options.warmup} + options.active;
  if (config.training().steps() < steps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[training] steps=", config.training().steps(), ": profile_run needs --profile.warmup=",
        options.warmup, " + --profile.active=", options.active, " = ", steps, " steps"));
  }
  TITAN_RETURN_IF_ERROR(WithContext(MakeDirectories(options.out), "--out"));
  TITAN_RETURN_IF_ERROR(RefuseForeignTraceEntries(options.out));
  // Before the model exists, so that its parameters are among the blocks seen.
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<MemoryTracker> tracker,
                         MemoryTracker::Create(PickDevice(runtime.env().local_rank)));
  Trainer trainer(config, runtime);
  TITAN_RETURN_IF_ERROR(trainer.Init());
  // Rank 0 holds the folder's lock now; the others wait until it has cleared an earlier run out.
  if (runtime.rank() == 0) {
    TITAN_ASSIGN_OR_RETURN(const int removed, RemoveEarlierOutputs(options.out));
    if (removed > 0)
      LOG(INFO) << "removed " << removed << " files of an earlier run from " << options.out;
  }
  TITAN_RETURN_IF_ERROR(runtime.Barrier());
  TITAN_ASSIGN_OR_RETURN(RankProfile mine,
                         ProfileSteps(trainer, runtime, *tracker, config, options));

  std::vector<RankProfile> ranks;
  if (!runtime.distributed()) {
    ranks.push_back(std::move(mine));
  } else {
    TITAN_ASSIGN_OR_RETURN(
        const std::vector<std::string> all,
        AllGatherStrings(runtime.comm(MeshGroup::kWorld), RankProfileToJson(mine).dump()));
    if (runtime.rank() != 0) return absl::OkStatus();
    for (const std::string& text : all) {
      TITAN_ASSIGN_OR_RETURN(RankProfile profile, RankProfileFromJson(nlohmann::json::parse(text)));
      ranks.push_back(std::move(profile));
    }
  }
  const ProfileRunInfo info = RunInfo(config, runtime, trainer, options);
  const std::string warning = MissingDeviceTimelineWarning(info, ranks);
  if (!warning.empty()) LOG(WARNING) << warning;
  TITAN_RETURN_IF_ERROR(
      WriteFileAtomically(options.out + "/summary.json", SummaryJson(info, ranks).dump(1)));
  TITAN_RETURN_IF_ERROR(WriteFileAtomically(options.out + "/report.html", ReportHtml(info, ranks)));
  for (const RankProfile& r : ranks) LOG(INFO) << SummaryLine(r);
  LOG(INFO) << "wrote " << options.out << "/report.html and summary.json";
  return absl::OkStatus();
}

}  // namespace

absl::Status RunProfile(const JobConfig& config, const DistributedRuntime& runtime,
                        const ProfileRunOptions& options) {
  return CatchTorchErrors([&]() -> absl::Status {
    // Before CatchTorchErrors' std::exception: a JSON error is a rank profile's, not LibTorch's.
    try {
      return Run(config, runtime, options);
    } catch (const nlohmann::json::exception& e) {
      return absl::InternalError(absl::StrCat("rank profile: ", e.what()));
    }
  });
}

}  // namespace titan
