#ifndef TITAN_LIB_PROFILING_STEP_PROFILER_H_
#define TITAN_LIB_PROFILING_STEP_PROFILER_H_

// torchtitan's [profiling] for titan_train: Kineto traces on a repeating step schedule and CUDA
// memory snapshots, written under the dump folder with torchtitan's file names.

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/config/job_config.pb.h"
#include "lib/profiling/phase_range.h"

namespace titan {

struct StepProfilerOptions {
  // [profiling] enable_profiling: Kineto traces, saved as
  // <traces_folder>/iteration_<N>/rank<rank>_trace.json for the cycle ending at step N.
  bool enable_profiling = false;
  std::string traces_folder;
  // Each cycle of profile_freq steps: profile_freq - warmup - active untouched steps, `warmup`
  // steps with the profiler started but discarding (its start-up cost stays out of the trace),
  // then `active` traced steps. Cycles end at the multiples of profile_freq, as in torchtitan.
  int profile_freq = 10;
  int warmup = 3;  // [profiling] profiler_warmup
  int active = 1;  // [profiling] profiler_active
  // [profiling] enable_memory_snapshot: records the CUDA caching allocator's history and dumps
  // <memory_snapshot_folder>/iteration_<N>/rank<rank>_memory_snapshot.pickle at every multiple N
  // of profile_freq. CUDA devices only.
  bool enable_memory_snapshot = false;
  std::string memory_snapshot_folder;
  int rank = 0;
  // The training device: CUDA adds GPU kernels to traces and allows memory snapshots.
  c10::Device device = c10::Device(c10::kCPU);

  // For profile_run, which traces one cycle: files named <folder>/trace_rank<r>.json and
  // <folder>/memory_snapshot_rank<r>.pickle instead of one iteration_<N> folder per cycle.
  bool single_cycle_files = false;
  // Traces written gzipped (<name>.json.gz; Perfetto opens them as they are).
  bool gzip_traces = false;
  // The traces' "distributedInfo" (DistributedRuntime::ProfilerDistributedInfo); "": none.
  std::string distributed_info;
};

// The [profiling] section for `rank` training on `device`, folders resolved under job.dump_folder;
// `distributed_info` as StepProfilerOptions::distributed_info.
StepProfilerOptions ProfilerOptionsFromConfig(const JobConfig& config, int rank,
                                              const c10::Device& device,
                                              std::string distributed_info);

// Drives the profilers from the training loop, on the thread that runs the steps:
//   profiler->StepBegin(step); ... forward, backward, optimizer ...; profiler->StepEnd(step);
// with steps counting from 1 (a resumed run starts at its checkpoint's step + 1; cycles stay
// aligned to multiples of profile_freq). Each traced step is wrapped in a "ProfilerStep#<step>"
// range, as torch.profiler marks steps, numbered by the trainer's step (torchtitan's traces carry
// torch.profiler's own count, one lower: iteration_10 holds ProfilerStep#9 there, #10 here).
class StepProfiler {
 public:
  // Null when neither traces nor memory snapshots are enabled, so a run without profiling calls
  // nothing per step. Errors name the [profiling] key at fault.
  static absl::StatusOr<std::unique_ptr<StepProfiler>> Create(const StepProfilerOptions& options);

  // A cycle cut short (the run stopped while tracing) is still saved, under the last step begun,
  // as torch.profiler does on exit; errors are logged. Memory history recording stops.
  ~StepProfiler();

  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Starts the profiler at a cycle's warmup or traced steps; errors if it cannot start (for
  // example, another profiler is running in this process).
  absl::Status StepBegin(int64_t step);

  // Saves the trace at the cycle's last step, and the memory snapshot at multiples of
  // profile_freq; `step` must be the one begun.
  absl::Status StepEnd(int64_t step);

  // After a CUDA out-of-memory error in the step after `last_step`: dumps the allocator's
  // history as <memory_snapshot_folder>/iteration_<last_step>_exit/rank<r>_memory_snapshot.pickle
  // (torchtitan's name). Does nothing without enable_memory_snapshot.
  absl::Status DumpMemorySnapshotOnOom(int64_t last_step);

  // Where the trace of the cycle ending at `step` is (or will be) written.
  std::string TracePath(int64_t step) const;

 private:
  enum class Session { kOff, kPrepared, kRecording };

  explicit StepProfiler(const StepProfilerOptions& options);

  bool IsTracedStep(int64_t step) const;
  absl::Status SaveTrace(int64_t step);
  absl::Status DumpMemorySnapshot(const std::string& path);
  std::string MemorySnapshotPath(const std::string& dir_name) const;

  const StepProfilerOptions options_;
  Session session_ = Session::kOff;
  std::optional<int64_t> current_step_;  // between StepBegin and StepEnd
  int64_t last_step_begun_ = 0;
  std::optional<PhaseRange> step_range_;  // "ProfilerStep#<step>" while a traced step runs
};

}  // namespace titan

#endif  // TITAN_LIB_PROFILING_STEP_PROFILER_H_
