#ifndef TITAN_LIB_PARALLEL_DISTRIBUTED_RUNTIME_H_
#define TITAN_LIB_PARALLEL_DISTRIBUTED_RUNTIME_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/config/job_config.pb.h"
#include "lib/distributed/comm_trace.h"
#include "lib/distributed/communicator.h"
#include "lib/distributed/distributed_env.h"
#include "lib/distributed/mesh_communicators.h"
#include "lib/distributed/parallel_dims.h"
#include "lib/distributed/rendezvous.h"

namespace titan {

// This process's place in the job: the mesh from [parallelism] and, with more than one rank, a
// communicator per mesh group (c10d's Gloo, plus c10d's NCCL for CUDA tensors on GPU machines;
// bootstrapped through rank 0's store) and the flight recorder they share ([comm] trace_buf_size,
// dumps in <job.dump_folder>/<comm.save_traces_folder>).
class DistributedRuntime {
 public:
  // One process: world size 1, no communicators.
  static DistributedRuntime SingleProcess();
  // Builds the mesh for env.world_size ranks and connects to the others (bounded by [comm]
  // init_timeout_seconds). Every parallelism composes: pp x dp_replicate x dp_shard x cp x tp.
  static absl::StatusOr<DistributedRuntime> Connect(const JobConfig& config,
                                                    const DistributedEnv& env);

  const DistributedEnv& env() const { return env_; }
  int rank() const { return env_.rank; }
  const ParallelDims& dims() const { return dims_; }
  // False for a single process; then comm() must not be called.
  bool distributed() const { return comms_.has_value(); }
  Communicator& comm(MeshGroup group) const { return comms_->Get(group); }
  const MeshCommunicators* comms() const { return comms_ ? &*comms_ : nullptr; }

  // The timeout of operations started afterwards, in every group.
  void SetTimeout(absl::Duration timeout) const;
  // The timeout operations started now get (infinite for a single process).
  absl::Duration timeout() const;
  // True on every rank iff `ok` is true on all of them (a world all-reduce; no-op alone).
  absl::StatusOr<bool> AllAgree(bool ok) const;
  // The largest of every rank's `value` (a world all-reduce; `value` alone).
  absl::StatusOr<int64_t> WorldMax(int64_t value) const;
  absl::Status Barrier() const;
  // Marks this run's flight-recorder dumps with `run_id` and sets an earlier run's aside
  // (CommTrace::StartRun); a single process, which records nothing, only sets them aside.
  absl::Status StartCommTrace(const std::string& run_id) const;
  // torch.profiler's "distributedInfo" trace metadata (JSON: backend, rank, world_size, pg_count,
  // pg_config), by which HolisticTraceAnalysis tells the ranks' traces apart; for one process,
  // where torch.profiler writes none and HTA refuses a trace without it, {"rank": 0, "world_size":
  // 1}.
  std::string ProfilerDistributedInfo() const;

 private:
  DistributedRuntime(DistributedEnv env, ParallelDims dims)
      : env_(std::move(env)), dims_(std::move(dims)) {}

  DistributedEnv env_;
  ParallelDims dims_;
  std::shared_ptr<Rendezvous> rendezvous_;
  std::shared_ptr<CommTrace> trace_;
  std::string lone_trace_folder_;  // A single process's dump folder (it has no trace_).
  std::optional<MeshCommunicators> comms_;
  std::string backend_;  // "gloo", or "nccl" for CUDA tensors
};

// Every group's timeout is `timeout` while this lives, then what it was before.
class ScopedCollectiveTimeout {
 public:
  ScopedCollectiveTimeout(const DistributedRuntime& runtime, absl::Duration timeout);
  ~ScopedCollectiveTimeout();
  ScopedCollectiveTimeout(const ScopedCollectiveTimeout&) = delete;
  ScopedCollectiveTimeout& operator=(const ScopedCollectiveTimeout&) = delete;

 private:
  const DistributedRuntime& runtime_;
  const absl::Duration previous_;
};

// How long the other ranks may wait in a collective while one rank copies `bytes` to the host and
// writes them (the final export): [comm] train_timeout_seconds plus a second per 32 MiB, a slow
// shared filesystem's pace. A waiting rank cannot tell a long write from a hung writer; the
// launcher still ends the job at once when a process dies.
absl::Duration OneWriterTimeout(const JobConfig& config, int64_t bytes);

// How titan_train, titan_rl and profile_run run a job on this process: the place in the job from
// the environment (DetectDistributedEnv), `config` validated for that world, the ranks connected,
// `body`, then a barrier so that no rank leaves while another may still talk to it. A refusal
// that starts "[section] key" comes back with the file:line or flag that set the key
// (WithKeySource).
absl::Status RunJobOnThisRank(const JobConfig& config,
                              const std::function<absl::Status(const DistributedRuntime&)>& body);

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_DISTRIBUTED_RUNTIME_H_
