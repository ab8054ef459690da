#ifndef TITAN_LIB_PROFILING_PROFILE_RUN_H_
#define TITAN_LIB_PROFILING_PROFILE_RUN_H_

#include <string>

#include "absl/status/status.h"
#include "lib/config/job_config.pb.h"
#include "lib/parallel/distributed_runtime.h"

namespace titan {

struct ProfileRunOptions {
  std::string out;    // the output folder
  int warmup = 2;     // steps run with the profiler started but keeping nothing
  int active = 3;     // traced steps after them
  bool gzip = false;  // traces as trace_rank<r>.json.gz
};

// The folder under `out` that holds the traces and nothing else: HolisticTraceAnalysis loads
// every .json / .gz file of the folder it is given as a rank's trace. RunProfile refuses to start
// when it holds an entry profile_run did not write.
constexpr char kProfileTracesFolder[] = "traces";

// profile_run: trains `config` (ProfiledJobConfig's, which the ranks connected with) on this rank
// as titan_train would (the same Trainer, model, parallelism and data; every rank calls it),
// warmup + active steps, and profiles the active ones.
// Each rank writes traces/trace_rank<r>.json under `options.out` (Kineto: ProfilerStep#N,
// forward / backward / optimizer / comm:<op> ranges, ATen ops with input shapes; CUDA kernels on a
// GPU), and into `options.out` ops_rank<r>.txt and .json (op table), profile_rank<r>.json (step
// split, memory timeline and peak by category, top ops), and on a GPU
// memory_snapshot_rank<r>.pickle; rank 0 then writes summary.json and report.html for every rank.
// The job's own dump folder is left alone: the run's config.toml lands in `out`, no checkpoint is
// saved or resumed ([checkpoint] initial_load_path still loads), [profiling] is replaced by these
// options and validation is skipped (config.toml records both at their defaults).
absl::Status RunProfile(const JobConfig& config, const DistributedRuntime& runtime,
                        const ProfileRunOptions& options);

// The job as profile_run runs it: [job] dump_folder is `options.out` (so the flight recorder's
// [comm] save_traces_folder, config.toml and the folder's lock are under --out, never in the job's
// own dump folder), no checkpoint saved or resumed ([checkpoint] initial_load_* kept; the other
// keys the job sets, logged as skipped), no
// TensorBoard, [profiling] and [validation] at their defaults (no validation runs; logged when the
// job enables it). The ranks must connect with this config, not the job's: the flight recorder's
// folder is fixed then.
JobConfig ProfiledJobConfig(JobConfig config, const ProfileRunOptions& options);

// Refuses the [checkpoint] keys profile_run does not read (all but initial_load_*: it saves and
// resumes no checkpoint) that `config` sets to other than their defaults from the command line,
// naming each flag. A job file's are logged as skipped by ProfiledJobConfig instead: titan_train's
// job files set them (configs/llama3_debugmodel.toml: enable, interval), and profile_run takes
// those files; but a value titan_train refuses (keep_latest_k = 1, say) is refused here as there
// (ValidateCheckpointConfig). KeySource tells the two apart: call it after ParseJobConfig read
// `config`, before ProfiledJobConfig.
absl::Status CheckCheckpointKeys(const JobConfig& config);

// `status` with a leading "[job] dump_folder" (profile_run's --out under ProfiledJobConfig) said
// as "--out": the user never set that key to that folder.
absl::Status AsOutFlag(const absl::Status& status);

}  // namespace titan

#endif  // TITAN_LIB_PROFILING_PROFILE_RUN_H_
