#include "lib/profiling/step_profiler.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/cuda/memory_snapshot.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/gzip_file.h"
#include "lib/util/status_macros.h"

// libtorch's, declared in torch/csrc/profiler/kineto_shim.h, which needs Kineto's headers (the
// torch wheel ships none).
namespace torch::autograd::profiler {
TORCH_API void addMetadataJson(const std::string& key, const std::string& value);
}  // namespace torch::autograd::profiler

namespace titan {
namespace {

namespace kineto = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

// torchtitan's [profiling]-era bound on recorded allocator events: caps host memory and dump time.
constexpr size_t kMemoryHistoryMaxEntries = 100000;

// torch.profiler.profile(record_shapes=True): Kineto, input shapes, no stacks or memory events.
ProfilerConfig TraceConfig() {
  return ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/true);
}

std::set<ActivityType> Activities(const c10::Device& device) {
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  return activities;
}

double SecondsSince(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

std::string ParentDir(const std::string& path) { return path.substr(0, path.rfind('/')); }

absl::Status TorchError(absl::string_view what, const c10::Error& e) {
  return absl::InternalError(absl::StrCat(what, ": ", e.what_without_backtrace()));
}

absl::Status ValidateOptions(const StepProfilerOptions& options) {
  if (options.profile_freq < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("[profiling] profile_freq=", options.profile_freq, ": expected >= 1"));
  }
  if (!options.enable_profiling) return absl::OkStatus();
  if (options.warmup < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("[profiling] profiler_warmup=", options.warmup, ": expected >= 0"));
  }
  if (options.active < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("[profiling] profiler_active=", options.active, ": expected >= 1"));
  }
  // In int64: a huge warmup must not wrap the sum negative and pass.
  if (int64_t{options.warmup} + options.active > options.profile_freq) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[profiling] profiler_warmup=%d + profiler_active=%d exceeds profile_freq=%d: a cycle "
        "must fit its warmup and traced steps",
        options.warmup, options.active, options.profile_freq));
  }
  return absl::OkStatus();
}

}  // namespace

StepProfilerOptions ProfilerOptionsFromConfig(const JobConfig& config, int rank,
                                              const c10::Device& device,
                                              std::string distributed_info) {
  const JobConfig::Profiling& profiling = config.profiling();
  StepProfilerOptions options;
  options.enable_profiling = profiling.enable_profiling();
  options.traces_folder = UnderDumpFolder(config, profiling.save_traces_folder());
  options.profile_freq = profiling.profile_freq();
  options.warmup = profiling.profiler_warmup();
  options.active = profiling.profiler_active();
  options.enable_memory_snapshot = profiling.enable_memory_snapshot();
  options.memory_snapshot_folder = UnderDumpFolder(config, profiling.save_memory_snapshot_folder());
  options.rank = rank;
  options.device = device;
  options.distributed_info = std::move(distributed_info);
  return options;
}

absl::StatusOr<std::unique_ptr<StepProfiler>> StepProfiler::Create(
    const StepProfilerOptions& options) {
  if (!options.enable_profiling && !options.enable_memory_snapshot) return nullptr;
  TITAN_RETURN_IF_ERROR(ValidateOptions(options));
  if (options.enable_memory_snapshot && !options.device.is_cuda()) {
    return absl::InvalidArgumentError("[profiling] enable_memory_snapshot: needs a CUDA device");
  }
  if (options.enable_profiling) {
    TITAN_RETURN_IF_ERROR(MakeDirectories(options.traces_folder));
    LOG(INFO) << "Profiling active. Traces will be saved at " << options.traces_folder;
  }
  if (options.enable_memory_snapshot) {
    TITAN_RETURN_IF_ERROR(MakeDirectories(options.memory_snapshot_folder));
    // Not run yet: no CUDA device was available where this was written. C++ stacks are the only
    // ones a C++ trainer has; the allocator records them for every allocation and free.
    try {
      const std::optional<std::string> all = "all";
      torch::cuda::_record_memory_history(/*enabled=*/all, /*context=*/all, /*stacks=*/"all",
                                          kMemoryHistoryMaxEntries);
    } catch (const c10::Error& e) {
      return TorchError("[profiling] enable_memory_snapshot: cannot record CUDA memory history", e);
    }
    LOG(INFO) << "Memory profiler active. Snapshot will be saved at "
              << options.memory_snapshot_folder;
  }
  return std::unique_ptr<StepProfiler>(new StepProfiler(options));
}

StepProfiler::StepProfiler(const StepProfilerOptions& options) : options_(options) {}

StepProfiler::~StepProfiler() {
  step_range_.reset();
  if (session_ == Session::kRecording) {
    LOG(INFO) << "Training stopped inside a profiling cycle: saving the steps traced so far";
    if (absl::Status status = SaveTrace(last_step_begun_); !status.ok()) LOG(ERROR) << status;
  } else if (session_ == Session::kPrepared) {
    // A warmed-up session is dropped as torch.profiler drops one: started, then stopped unsaved.
    try {
      kineto::enableProfiler(TraceConfig(), Activities(options_.device));
      kineto::disableProfiler();
    } catch (const c10::Error& e) {
      LOG(ERROR) << TorchError("cannot stop the profiler", e);
    }
  }
  if (options_.enable_memory_snapshot) {
    try {
      torch::cuda::_record_memory_history(std::nullopt);
    } catch (const c10::Error& e) {
      LOG(ERROR) << TorchError("cannot stop recording CUDA memory history", e);
    }
  }
}

bool StepProfiler::IsTracedStep(int64_t step) const {
  return (step - 1) % options_.profile_freq >= options_.profile_freq - options_.active;
}

absl::Status StepProfiler::StepBegin(int64_t step) {
  if (step < 1) return absl::InvalidArgumentError(absl::StrCat("step ", step, ": expected >= 1"));
  if (current_step_.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("StepBegin(", step, ") before StepEnd(", *current_step_, ")"));
  }
  current_step_ = step;
  last_step_begun_ = step;
  if (!options_.enable_profiling) return absl::OkStatus();
  const int64_t position = (step - 1) % options_.profile_freq;
  if (position < options_.profile_freq - options_.active - options_.warmup) {
    return absl::OkStatus();
  }
  // Kineto does not refuse a second session on a thread; the two would corrupt each other's state.
  if (session_ != Session::kRecording && torch::profiler::impl::profilerEnabled()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot start the profiler at step ", step, ": another profiler is running"));
  }
  try {
    // A resumed run may begin mid-cycle: a traced step then also does the warmup's start-up.
    if (session_ == Session::kOff) {
      kineto::prepareProfiler(TraceConfig(), Activities(options_.device));
      session_ = Session::kPrepared;
    }
    if (!IsTracedStep(step)) return absl::OkStatus();
    if (session_ == Session::kPrepared) {
      kineto::enableProfiler(TraceConfig(), Activities(options_.device));
      session_ = Session::kRecording;
      // As torch.profiler, once the session records.
      if (!options_.distributed_info.empty()) {
        torch::autograd::profiler::addMetadataJson("distributedInfo", options_.distributed_info);
      }
    }
  } catch (const c10::Error& e) {
    return TorchError(absl::StrCat("cannot start the profiler at step ", step), e);
  }
  step_range_.emplace(absl::StrCat("ProfilerStep#", step));
  return absl::OkStatus();
}

absl::Status StepProfiler::StepEnd(int64_t step) {
  if (current_step_ != step) {
    return absl::FailedPreconditionError(
        current_step_.has_value()
            ? absl::StrCat("StepEnd(", step, ") while step ", *current_step_, " runs")
            : absl::StrCat("StepEnd(", step, ") without StepBegin"));
  }
  current_step_.reset();
  step_range_.reset();
  const bool cycle_end = step % options_.profile_freq == 0;
  absl::Status status;
  if (session_ == Session::kRecording && cycle_end) status.Update(SaveTrace(step));
  if (options_.enable_memory_snapshot && cycle_end) {
    status.Update(DumpMemorySnapshot(MemorySnapshotPath(absl::StrCat("iteration_", step))));
  }
  return status;
}

namespace {

// Why Kineto wrote no trace into `folder`, as far as this process can tell: Kineto logs its
// failure instead of throwing, and its log may be silenced (KINETO_LOG_LEVEL=5 on a CPU-only
// machine). `partial` is Kineto's temporary file, still there.
std::string NoTraceCause(const std::string& folder, const std::string& partial) {
  struct stat info;
  const bool has_partial = ::stat(partial.c_str(), &info) == 0;
  if (has_partial && S_ISDIR(info.st_mode)) {
    return absl::StrCat(partial, ", its temporary file, is a folder");
  }
  struct statvfs disk;
  // Under 1 MiB left: the write stopped at a full disk (a reserve for root may remain).
  constexpr uint64_t kFull = uint64_t{1} << 20;
  if (::statvfs(folder.c_str(), &disk) == 0 &&
      uint64_t{disk.f_bavail} * uint64_t{disk.f_frsize} < kFull) {
    return absl::StrCat(
        "the disk holding ", folder, " is full (",
        uint64_t{disk.f_bavail} * uint64_t{disk.f_frsize}, " bytes free",
        has_partial ? absl::StrCat(" with ", info.st_size, " bytes of the trace written") : "",
        "); free space there or choose another folder");
  }
  rlimit limit;
  if (has_partial && ::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY &&
      static_cast<uint64_t>(info.st_size) >= limit.rlim_cur) {
    return absl::StrCat("the file size limit (ulimit -f: ", limit.rlim_cur,
                        " bytes) stopped the trace at ", info.st_size, " bytes");
  }
  if (::access(folder.c_str(), W_OK) != 0) {
    return absl::StrCat(folder, " is not writable: ", std::strerror(errno));
  }
  // Kineto's levels: 0 verbose, 1 info, 2 warning, 3 error, above that nothing.
  const char* level = std::getenv("KINETO_LOG_LEVEL");
  int quiet = 0;
  if (level != nullptr && absl::SimpleAtoi(level, &quiet) && quiet > 3) {
    return absl::StrCat(
        "the folder is writable and its disk has space; Kineto's errors are not "
        "logged with KINETO_LOG_LEVEL=",
        level, ": rerun with KINETO_LOG_LEVEL=3 to see them");
  }
  return "the folder is writable and its disk has space; Kineto's log above may say why";
}

}  // namespace

absl::Status StepProfiler::SaveTrace(int64_t step) {
  LOG(INFO) << "Dumping profiler traces at step " << step;
  const auto begin = std::chrono::steady_clock::now();
  session_ = Session::kOff;
  std::unique_ptr<kineto::ProfilerResult> result;
  try {
    // As torch.profiler's exit: kernels still running (the last step's optimizer) are traced.
    if (options_.device.is_cuda()) {
      const c10::impl::VirtualGuardImpl guard(options_.device.type());
      guard.synchronizeDevice(guard.getDevice().index());
    }
    result = kineto::disableProfiler();
  } catch (const c10::Error& e) {
    return TorchError(absl::StrCat("cannot stop the profiler at step ", step), e);
  }
  const std::string path = TracePath(step);
  const std::string json_path = options_.gzip_traces ? path.substr(0, path.size() - 3) : path;
  TITAN_RETURN_IF_ERROR(MakeDirectories(ParentDir(path)));
  // Kineto writes a temporary file and renames it: a reader never sees a half-written trace. It
  // logs a failure instead of throwing, so a trace left by an earlier run must not pass for ours.
  for (const std::string& stale : {path, json_path}) {
    if (std::remove(stale.c_str()) != 0 && errno != ENOENT) return ErrnoError("remove", stale);
  }
  try {
    result->save(json_path);
  } catch (const c10::Error& e) {
    return TorchError(absl::StrCat("cannot write ", json_path), e);
  }
  if (!PathExists(json_path)) {
    // Kineto leaves its partial <trace>.tmp behind (on a full disk, as large as the disk allowed).
    // The cause is taken before it goes (its removal frees the disk).
    const std::string partial = json_path + ".tmp";
    const std::string cause = NoTraceCause(ParentDir(json_path), partial);
    if (unlink(partial.c_str()) != 0 && errno != ENOENT && errno != EISDIR) {
      LOG(ERROR) << ErrnoError("remove", partial);
    }
    return absl::InternalError(absl::StrCat("Kineto wrote no trace to ", json_path, ": ", cause));
  }
  if (options_.gzip_traces) TITAN_RETURN_IF_ERROR(GzipFile(json_path, path));
  LOG(INFO) << absl::StrFormat("Finished dumping profiler traces in %.2f seconds",
                               SecondsSince(begin));
  return absl::OkStatus();
}

std::string StepProfiler::TracePath(int64_t step) const {
  const std::string suffix = options_.gzip_traces ? ".json.gz" : ".json";
  if (options_.single_cycle_files) {
    return absl::StrCat(options_.traces_folder, "/trace_rank", options_.rank, suffix);
  }
  return absl::StrCat(options_.traces_folder, "/iteration_", step, "/rank", options_.rank, "_trace",
                      suffix);
}

std::string StepProfiler::MemorySnapshotPath(const std::string& dir_name) const {
  if (options_.single_cycle_files) {
    return absl::StrCat(options_.memory_snapshot_folder, "/memory_snapshot_rank", options_.rank,
                        ".pickle");
  }
  return absl::StrCat(options_.memory_snapshot_folder, "/", dir_name, "/rank", options_.rank,
                      "_memory_snapshot.pickle");
}

absl::Status StepProfiler::DumpMemorySnapshotOnOom(int64_t last_step) {
  if (!options_.enable_memory_snapshot) return absl::OkStatus();
  return DumpMemorySnapshot(MemorySnapshotPath(absl::StrCat("iteration_", last_step, "_exit")));
}

absl::Status StepProfiler::DumpMemorySnapshot(const std::string& path) {
  LOG(INFO) << "Dumping memory snapshot to " << path;
  const auto begin = std::chrono::steady_clock::now();
  TITAN_RETURN_IF_ERROR(MakeDirectories(ParentDir(path)));
  // Not run yet (no CUDA device here): LibTorch's own pickle of the allocator state and history,
  // what torch.cuda.memory._snapshot() holds; pytorch.org/memory_viz reads it.
  std::string pickled;
  try {
    pickled = torch::cuda::_memory_snapshot_pickled();
  } catch (const c10::Error& e) {
    return TorchError("cannot take a CUDA memory snapshot", e);
  }
  TITAN_RETURN_IF_ERROR(WriteFileAtomically(path, pickled));
  LOG(INFO) << absl::StrFormat("Finished dumping memory snapshot in %.2f seconds",
                               SecondsSince(begin));
  return absl::OkStatus();
}

}  // namespace titan
