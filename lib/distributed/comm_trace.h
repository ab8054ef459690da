#ifndef TITAN_LIB_DISTRIBUTED_COMM_TRACE_H_
#define TITAN_LIB_DISTRIBUTED_COMM_TRACE_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace titan {

struct CommTraceOptions {
  // Operations kept, the newest ([comm] trace_buf_size); 0 records nothing and starts nothing.
  // Memory grows with the operations recorded, up to this many, as c10d's ring does.
  int buffer_size = 20000;
  // Dumps go to <folder>/<file_prefix><rank>, the layout PyTorch's fr_trace reads (a folder and a
  // file prefix; torchtitan's names).
  std::string folder = "comm_traces";
  std::string file_prefix = "rank_";
  int rank = 0;
  int world_size = 1;
  // Where ranks ask each other to dump; null: this rank only.
  c10::intrusive_ptr<c10d::Store> store;
  // How long a rank that hit a failure waits for the other ranks' dumps (a full default ring takes
  // ~0.25 s to write; a dead rank never answers, so this delays its peers' exit).
  absl::Duration peer_dump_wait = absl::Seconds(5);
};

class CommEvent;
struct TraceGroup;

// Moves the dumps an earlier run left in `folder` (<file_prefix><r>) into the sibling
// <folder>.earlier-<run_id>/, saying so in the log: a rerun in the same dump folder, even one that
// writes no dump (a single process, the recorder off), would otherwise leave them as its own. Not
// into a subfolder: fr_trace reads every subfolder's dumps, keyed by file name, as the run's.
absl::Status SetEarlierDumpsAside(const std::string& folder, const std::string& file_prefix,
                                  const std::string& run_id);

// A recorded operation; CommTrace::Retire closes it.
struct TraceId {
  std::optional<size_t> id;
  std::optional<size_t> epoch;
  uint64_t ticket = 0;
  int64_t op_seq = 0;  // Its place in the group's operations, as pg_status counts them.
  CommEvent* event = nullptr;  // Its buffer slot's end event.
};

// The job's collective flight recorder in this process: c10d's FlightRecorder (the header template
// behind ProcessGroupNCCL's TORCH_NCCL_TRACE_BUFFER_SIZE), fed by titan's communicators for every
// backend, so one ring buffer per rank holds Gloo and NCCL operations alike. Dumps are c10d's
// pickle, read by `python -m torch.distributed.flight_recorder.fr_trace <folder>`. A rank dumps
// when one of its operations fails (and asks every other rank to dump too, through the store), on
// SIGUSR1, and when c10d's NCCL watchdog dumps (see RegisterWithC10d). Creating one also switches
// off the recorder c10d's ProcessGroupGloo keeps of its own (see comm_trace.cc).
class CommTrace : public std::enable_shared_from_this<CommTrace> {
 public:
  static absl::StatusOr<std::shared_ptr<CommTrace>> Create(CommTraceOptions options);
  ~CommTrace();
  CommTrace(const CommTrace&) = delete;
  CommTrace& operator=(const CommTrace&) = delete;

  bool enabled() const { return options_.buffer_size > 0; }
  const CommTraceOptions& options() const { return options_; }
  // <folder>/<file_prefix><rank>.
  std::string DumpPath() const;

  // A process group as dumps name it: `name` unique in the job, `backend` for the dump's library
  // version field. Null when disabled.
  std::shared_ptr<TraceGroup> AddGroup(const std::string& name,
                                       const std::vector<int>& global_ranks,
                                       const std::string& backend);
  // Records `op` (the analyzer's names: "all_reduce", "send 0->1", ...) as issued on `group` with
  // `work` running it. `p2p` operations count in the group's p2p sequence, others in its
  // collective sequence. A no-op when disabled or `group` is null.
  TraceId Record(TraceGroup* group, const std::string& op, bool p2p,
                 const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                 c10::intrusive_ptr<c10d::Work> work, absl::Duration timeout);
  // After the operation's Work was waited for (well or not). `ok`: the wait succeeded, so the
  // entry reads completed (whatever the Work's isCompleted says) and the group's completed
  // sequence number moves up to it, never past an operation that failed.
  void Retire(TraceGroup* group, const TraceId& id, bool ok);
  // After the operation failed (timeout, peer gone): its entry keeps the state it reached, as
  // c10d leaves a timed-out operation, so every rank's dump shows where the group stopped; the
  // group's completed sequence number stays below it from now on.
  void Fail(TraceGroup* group, const TraceId& id);
  // For device-side waits: the operation is done once `done` is; dumps query it. The entry stays
  // open (not retired), as c10d leaves an NCCL operation until its watchdog sees the end event.
  void CompleteOn(const TraceId& id, c10::Event done);

  // Makes c10d's own dumps (ProcessGroupNCCL's watchdog writes one when a collective times out)
  // write this trace instead, and ask the other ranks for theirs. Once per process.
  void RegisterWithC10d();

  // Dumps from now on carry `run_id` (an extra key, "run_id", that c10d's format allows), so an
  // analyser can refuse a folder mixing runs.
  void SetRunId(const std::string& run_id);
  // SetRunId, and on rank 0 SetEarlierDumpsAside (enabled or not). Call once the run owns the
  // dump folder.
  absl::Status StartRun(const std::string& run_id);

  // Writes this rank's dump now, with an extra top-level key, "rank" (options().rank), that
  // fr_trace ignores: a dump copied under another rank's file name is then told apart.
  absl::Status Dump(absl::string_view reason);
  // Writes this rank's dump and asks every rank to write theirs, waiting up to peer_dump_wait for
  // them: what a failed operation calls, so a hang leaves one file per rank to analyse.
  void DumpAllRanks(absl::string_view reason);

 private:
  class Recorder;

  explicit CommTrace(CommTraceOptions options);
  // Answers SIGUSR1 and other ranks' dump requests until destruction.
  void Watch();
  bool PeerRequestPending();
  // Tells the store this rank has dumped (once per process).
  void MarkDumped();

  const CommTraceOptions options_;
  std::unique_ptr<Recorder> recorder_;
  c10::intrusive_ptr<c10d::Store> store_;  // The watcher's own connection, under a prefix.
  // One per buffer slot, added as the ring fills: stable addresses for c10d.
  std::vector<std::unique_ptr<CommEvent>> events_;
  std::mutex record_mutex_;
  std::string run_id_;  // Guarded by the recorder's dump mutex.
  uint64_t next_ticket_ = 0;
  size_t next_group_id_ = 0;
  std::atomic<bool> answered_request_{false};
  std::atomic<bool> marked_dumped_{false};
  std::atomic<bool> stop_{false};
  int wake_pipe_[2] = {-1, -1};
  std::thread watcher_;
};

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_COMM_TRACE_H_
