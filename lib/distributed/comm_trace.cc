#include "lib/distributed/comm_trace.h"

#include <fcntl.h>
#include <poll.h>
#include <torch/csrc/distributed/c10d/TraceUtils.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#include <torch/csrc/distributed/c10d/FlightRecorderDetail.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/logger.hpp>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "lib/distributed/dump_signal.h"
#include "lib/distributed/group_state.h"
#include "lib/util/c10_log_filter.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"

namespace titan {

struct TraceGroup : std::enable_shared_from_this<TraceGroup> {
  size_t pg_id = 0;
  std::tuple<std::string, std::string> pg_name;
  std::shared_ptr<c10d::ProcessGroupStatus> status = std::make_shared<c10d::ProcessGroupStatus>();
  size_t collective_seq = 0;
  size_t p2p_seq = 0;
  size_t op_seq = 0;
  int64_t failed_seq = 0;  // The first operation that failed; 0 while none has.
};

// What c10d's FlightRecorder asks of an entry's end event: has the operation finished? One per
// buffer slot, reused when the ring wraps, so a pointer the recorder holds is never dangling.
class CommEvent {
 public:
  bool query() {
    std::lock_guard<std::mutex> lock(mutex_);
    // A failed operation (timeout, peer gone) is not completed: it stays where it hung.
    if (work_) return work_->isCompleted() && work_->exception() == nullptr;
    return done_ ? done_->query() : completed_;
  }

  void Start(uint64_t ticket, c10::intrusive_ptr<c10d::Work> work,
             std::shared_ptr<TraceGroup> group, int64_t op_seq) {
    std::lock_guard<std::mutex> lock(mutex_);
    ticket_ = ticket;
    work_ = std::move(work);
    done_.reset();
    completed_ = false;
    group_ = std::move(group);
    op_seq_ = op_seq;
  }

  // The group and place of the operation recorded here (null group: none yet).
  std::pair<std::shared_ptr<TraceGroup>, int64_t> Operation() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {group_, op_seq_};
  }

  // Completion is `done` from now on; the Work (and its tensors) is let go.
  void FinishOn(uint64_t ticket, c10::Event done) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ticket_ != ticket || !work_) return;
    work_.reset();
    done_.emplace(std::move(done));
  }

  // Drops the Work (and the tensors it holds) unless the slot was reused meanwhile. `waited_ok`:
  // its wait returned without error, which is completion even where the Work's isCompleted
  // never turns true (ProcessGroupGloo's _reduce_scatter_base in torch 2.11).
  void Finish(uint64_t ticket, bool waited_ok) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ticket_ != ticket || !work_) return;
    completed_ = waited_ok || (work_->isCompleted() && work_->exception() == nullptr);
    work_.reset();
  }

 private:
  std::mutex mutex_;
  uint64_t ticket_ = 0;
  c10::intrusive_ptr<c10d::Work> work_;
  std::optional<c10::Event> done_;
  bool completed_ = false;
  std::shared_ptr<TraceGroup> group_;
  int64_t op_seq_ = 0;
};

namespace {

// Counts operation `op_seq` of `group` completed in its pg_status, below any failed one.
void MarkCompleted(TraceGroup& group, int64_t op_seq) {
  int64_t completed = std::max(group.status->lastCompletedSeq, op_seq);
  if (group.failed_seq > 0) completed = std::min(completed, group.failed_seq - 1);
  group.status->lastCompletedSeq = completed;
}

}  // namespace

}  // namespace titan

namespace c10d {
// Required by FlightRecorder<E>::retire_id; titan retires without durations, so never called.
template <>
float getDurationFromEvent<titan::CommEvent>(titan::CommEvent&, titan::CommEvent&) {
  return 0.0f;
}
}  // namespace c10d

namespace titan {
namespace {

// c10d's name for a group without a description: fr_trace then prints the name alone.
constexpr char kNoDescription[] = "undefined";
// A dump request reaches every rank within this; one store check per rank per interval.
constexpr absl::Duration kWatchInterval = absl::Milliseconds(500);
constexpr char kRequestKey[] = "request";
constexpr char kDumpedCountKey[] = "dumped_count";

std::atomic<int> g_signal_pipe{-1};

void OnDumpSignal(int) {
  const int fd = g_signal_pipe.load();
  if (fd >= 0) (void)!write(fd, "s", 1);
}

// c10d's process groups keep flight recorders of their own, each sized by TORCH_FR_BUFFER_SIZE
// when first used. ProcessGroupGloo's would record every Gloo operation a second time, under
// "gloo:" names that torch 2.11's fr_trace rejects: it is created now, while the size reads 0.
// ProcessGroupNCCL's keeps one entry when tracing, because c10d's watchdog dumps on a timeout only
// when it records; that dump then reaches the writer RegisterWithC10d installs.
void ConfigureC10dRecorders(bool tracing, absl::Duration peer_dump_wait) {
  static std::once_flag once;
  std::call_once(once, [tracing, peer_dump_wait] {
    // c10d reads TORCH_NCCL_TRACE_BUFFER_SIZE as a deprecated alias of TORCH_FR_BUFFER_SIZE.
    for (const char* name : {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"}) {
      if (const char* user = std::getenv(name)) {
        LOG(WARNING) << name << "=" << user << " is ignored: [comm] trace_buf_size sizes titan's "
                     << "collective recorder";
      }
    }
    // c10d would still parse it (a non-number throws) and warn that it is deprecated.
    unsetenv("TORCH_NCCL_TRACE_BUFFER_SIZE");
    setenv("TORCH_FR_BUFFER_SIZE", "0", 1);
    (void)c10d::dump_fr_trace_json(/*includeCollectives=*/false, /*onlyActive=*/false);
    setenv("TORCH_FR_BUFFER_SIZE", tracing ? "1" : "0", 1);
    // As torchtitan: a recorded job dumps when the watchdog sees a timeout (unless told otherwise).
    if (!tracing) return;
    setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "1", /*overwrite=*/0);
    // The watchdog then waits this long for the dump before taking the process down: our writer
    // needs peer_dump_wait for the other ranks' dumps plus its own write, not c10d's default.
    const int64_t dump_ms = absl::ToInt64Milliseconds(peer_dump_wait) + 5000;
    setenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", absl::StrCat(dump_ms).c_str(), /*overwrite=*/0);
  });
}

// c10d's dump hook: it hands over its NCCL recorder's pickle; this writes titan's, which holds the
// same NCCL operations and the Gloo ones too.
class C10dDumpWriter : public c10d::DebugInfoWriter {
 public:
  C10dDumpWriter(std::weak_ptr<CommTrace> trace, const std::string& prefix, int rank)
      : c10d::DebugInfoWriter(prefix, rank), trace_(std::move(trace)) {}

  void write(const std::string& /*c10d_trace*/) override {
    if (std::shared_ptr<CommTrace> trace = trace_.lock()) {
      trace->DumpAllRanks("c10d's NCCL watchdog dumped (a collective timed out)");
    }
  }

 private:
  const std::weak_ptr<CommTrace> trace_;
};

// c10d's dump pickle with top-level "rank" and "run_id" (if any) added: FlightRecorder::dump takes
// no extra keys, and names no writer, so a dump copied under another rank's name would pass.
std::string WithTitanKeys(const std::string& pickle, int rank, const std::string& run_id) {
  c10::impl::GenericDict root = torch::jit::unpickle(pickle.data(), pickle.size()).toGenericDict();
  root.insert_or_assign("rank", static_cast<int64_t>(rank));
  // The entries' time_created_ns clock: an analyser tells a dump older than a peer's collective.
  root.insert_or_assign("dump_time_ns", static_cast<int64_t>(absl::ToUnixNanos(absl::Now())));
  if (!run_id.empty()) root.insert_or_assign("run_id", run_id);
  return c10d::pickle_str(root);
}

}  // namespace

class CommTrace::Recorder {
 public:
  explicit Recorder(size_t entries) {
    // Sized from the config, not from TORCH_FR_BUFFER_SIZE, which c10d's constructor read.
    recorder.max_entries_ = entries;
    recorder.enabled_ = entries > 0;
  }
  c10d::FlightRecorder<CommEvent> recorder;
  std::mutex dump_mutex;  // Serialises file writes: the watcher and a failing caller may race.
};

CommTrace::CommTrace(CommTraceOptions options) : options_(std::move(options)) {}

absl::StatusOr<std::shared_ptr<CommTrace>> CommTrace::Create(CommTraceOptions options) {
  if (options.buffer_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("comm trace: buffer size must be >= 0, got ", options.buffer_size));
  }
  std::shared_ptr<CommTrace> trace(new CommTrace(std::move(options)));
  ConfigureC10dRecorders(trace->enabled(), trace->options_.peer_dump_wait);
  if (!trace->enabled()) {
    // SIGUSR1's default action would end the job that asked for a dump of nothing.
    std::signal(SIGUSR1, SIG_IGN);
    LOG(INFO) << "collective flight recorder off ([comm] trace_buf_size = 0): SIGUSR1 is ignored";
    return trace;
  }
  const CommTraceOptions& o = trace->options_;
  trace->recorder_ = std::make_unique<Recorder>(static_cast<size_t>(o.buffer_size));
  if (o.store) {
    try {
      // Its own connection: the watcher's polls never wait behind the trainer's store calls.
      trace->store_ = c10::make_intrusive<c10d::PrefixStore>("titan/comm_trace", o.store->clone());
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat("comm trace: store connection: ", Reason(e)));
    }
  }
  if (pipe2(trace->wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return ErrnoError("pipe", "comm trace");
  }
  g_signal_pipe.store(trace->wake_pipe_[1]);
  struct sigaction action {};
  action.sa_handler = OnDumpSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  trace->watcher_ = std::thread([raw = trace.get()] { raw->Watch(); });
  return trace;
}

CommTrace::~CommTrace() {
  if (!watcher_.joinable()) return;
  stop_ = true;
  int expected = wake_pipe_[1];
  // A request after this is logged and ignored: SIGUSR1's default action would fail a job that
  // finished its work.
  if (g_signal_pipe.compare_exchange_strong(expected, -1)) IgnoreDumpRequests();
  (void)!write(wake_pipe_[1], "q", 1);
  watcher_.join();
  close(wake_pipe_[0]);
  close(wake_pipe_[1]);
}

std::string CommTrace::DumpPath() const {
  return absl::StrCat(options_.folder, "/", options_.file_prefix, options_.rank);
}

std::shared_ptr<TraceGroup> CommTrace::AddGroup(const std::string& name,
                                                const std::vector<int>& global_ranks,
                                                const std::string& backend) {
  if (!enabled()) return nullptr;
  auto group = std::make_shared<TraceGroup>();
  group->pg_name = std::make_tuple(name, std::string(kNoDescription));
  {
    std::lock_guard<std::mutex> lock(record_mutex_);
    group->pg_id = next_group_id_++;
  }
  recorder_->recorder.record_pg_ranks(
      group->pg_name, std::vector<uint64_t>(global_ranks.begin(), global_ranks.end()));
  recorder_->recorder.record_accelerator_version(backend);
  return group;
}

TraceId CommTrace::Record(TraceGroup* group, const std::string& op, bool p2p,
                          const std::vector<at::Tensor>& inputs,
                          const std::vector<at::Tensor>& outputs,
                          c10::intrusive_ptr<c10d::Work> work, absl::Duration timeout) {
  if (!enabled() || group == nullptr) return TraceId();
  ++group->op_seq;
  if (p2p) {
    ++group->p2p_seq;
  } else {
    ++group->collective_seq;
  }
  group->status->lastEnqueuedSeq = static_cast<int64_t>(group->op_seq);
  group->status->lastEnqueuedWorkName = op;
  std::lock_guard<std::mutex> lock(record_mutex_);
  const uint64_t ticket = next_ticket_++;
  // Grown one slot at a time: a large ring costs memory only once that many operations ran.
  if (events_.size() < static_cast<size_t>(options_.buffer_size)) {
    events_.push_back(std::make_unique<CommEvent>());
  }
  CommEvent* event = events_[ticket % static_cast<uint64_t>(options_.buffer_size)].get();
  event->Start(ticket, std::move(work), group->shared_from_this(),
               static_cast<int64_t>(group->op_seq));
  // The analyzer (torch 2.11's fr_trace) parses "<library>:<op>" and accepts only nccl and xccl
  // as the library, so every backend's operations use "nccl:"; the group name says which ran.
  const auto traced = recorder_->recorder.recordWithResetEnabled(
      group->pg_id, group->pg_name, group->collective_seq, group->p2p_seq, group->op_seq,
      absl::StrCat("nccl:", op), inputs, outputs, /*start=*/nullptr, event,
      std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout)), group->status, p2p);
  return TraceId{traced.id, traced.reset_epoch, ticket, static_cast<int64_t>(group->op_seq), event};
}

void CommTrace::Retire(TraceGroup* group, const TraceId& id, bool ok) {
  if (!enabled() || !id.id) return;
  // Before retire_id, which reads the entry's state for the last time.
  id.event->Finish(id.ticket, ok);
  recorder_->recorder.retire_id(id.id, id.epoch, /*compute_duration=*/false);
  if (!ok || group == nullptr) return;
  std::lock_guard<std::mutex> lock(record_mutex_);
  // This operation's own number (others may still be in flight).
  MarkCompleted(*group, id.op_seq);
}

void CommTrace::Fail(TraceGroup* group, const TraceId& id) {
  if (!enabled() || !id.id) return;
  id.event->Finish(id.ticket, false);
  if (group == nullptr) return;
  std::lock_guard<std::mutex> lock(record_mutex_);
  if (group->failed_seq == 0 || id.op_seq < group->failed_seq) group->failed_seq = id.op_seq;
  group->status->lastCompletedSeq =
      std::min(group->status->lastCompletedSeq, group->failed_seq - 1);
}

void CommTrace::RegisterWithC10d() {
  if (!enabled()) return;
  static std::once_flag once;
  std::call_once(once, [this] {
    try {
      c10d::DebugInfoWriter::registerWriter(std::make_unique<C10dDumpWriter>(
          weak_from_this(), absl::StrCat(options_.folder, "/", options_.file_prefix),
          options_.rank));
    } catch (const std::exception& e) {
      LOG(ERROR) << "comm trace: c10d's dumps will not reach titan's trace: " << Reason(e);
    }
  });
}

void CommTrace::CompleteOn(const TraceId& id, c10::Event done) {
  if (!enabled() || !id.id) return;
  id.event->FinishOn(id.ticket, std::move(done));
}

void CommTrace::SetRunId(const std::string& run_id) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(recorder_->dump_mutex);
  run_id_ = run_id;
}

absl::Status SetEarlierDumpsAside(const std::string& folder, const std::string& file_prefix,
                                  const std::string& run_id) {
  std::vector<std::string> names;
  for (const int rank : RanksIn(folder, file_prefix, "")) {
    const std::string file = absl::StrCat(file_prefix, rank);
    if (IsRegularFile(JoinPath(folder, file))) names.push_back(file);
  }
  if (names.empty()) return absl::OkStatus();
  // A sibling, whatever trails the name ("traces//", "traces/."): fr_trace walks subfolders.
  absl::string_view name = folder;
  while (name.size() > 1 && (absl::ConsumeSuffix(&name, "/") || absl::ConsumeSuffix(&name, "/."))) {
  }
  const std::string aside = absl::StrCat(name, ".earlier-", run_id);
  absl::Status moved = MakeDirectories(aside);
  for (const std::string& name : names) {
    const std::string path = JoinPath(folder, name);
    if (moved.ok()) moved = RenamePath(path, JoinPath(aside, name));
    if (!moved.ok()) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, ": cannot set an earlier run's comm trace aside in ", aside, ": ",
                       moved.message()));
    }
  }
  std::sort(names.begin(), names.end());
  LOG(WARNING) << "comm trace: moved an earlier run's dumps (" << absl::StrJoin(names, ", ")
               << ") to " << aside << ", so this run's dumps stand alone";
  return absl::OkStatus();
}

absl::Status CommTrace::StartRun(const std::string& run_id) {
  SetRunId(run_id);
  if (options_.rank != 0) return absl::OkStatus();
  // With the recorder off too: the earlier dumps would read as this run's.
  return SetEarlierDumpsAside(options_.folder, options_.file_prefix, run_id);
}

absl::Status CommTrace::Dump(absl::string_view reason) {
  if (!enabled()) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(recorder_->dump_mutex);
  {
    // Entries read completed once the backend finished them, waited on or not (as c10d's
    // watchdog counts them): pg_status says the same.
    std::lock_guard<std::mutex> record_lock(record_mutex_);
    for (const std::unique_ptr<CommEvent>& event : events_) {
      const auto [group, op_seq] = event->Operation();
      if (group != nullptr && event->query()) MarkCompleted(*group, op_seq);
    }
  }
  std::string pickle;
  try {
    pickle = recorder_->recorder.dump(std::nullopt, /*includeCollectives=*/true,
                                      /*includeStackTraces=*/true, /*onlyActive=*/false);
    pickle = WithTitanKeys(pickle, options_.rank, run_id_);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("comm trace: dump: ", Reason(e)));
  }
  if (absl::Status made = MakeDirectories(options_.folder); !made.ok()) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the comm trace folder: ", made.message()));
  }
  const std::string path = DumpPath();
  if (absl::Status written = WriteFileAtomically(path, pickle); !written.ok()) return written;
  LOG(WARNING) << "comm trace: rank " << options_.rank << " wrote " << path << " (" << reason
               << "); analyse with: python -m torch.distributed.flight_recorder.fr_trace "
               << options_.folder;
  return absl::OkStatus();
}

void CommTrace::DumpAllRanks(absl::string_view reason) {
  if (!enabled()) return;
  answered_request_ = true;  // This rank's watcher need not answer the request it makes.
  if (absl::Status dumped = Dump(reason); !dumped.ok()) LOG(ERROR) << dumped.message();
  if (!store_) return;
  QuietC10Warnings quiet;  // A store that fails is reported below, once.
  try {
    MarkDumped();
    const std::string request = absl::StrCat("rank ", options_.rank, ": ", reason);
    store_->set(kRequestKey, std::vector<uint8_t>(request.begin(), request.end()));
    // One counter to poll, not a key per rank: every rank of a big job may be waiting at once.
    const absl::Time deadline = absl::Now() + options_.peer_dump_wait;
    while (store_->add(kDumpedCountKey, 0) < options_.world_size && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (store_->add(kDumpedCountKey, 0) < options_.world_size) {
      std::vector<int> missing;
      for (int rank = 0; rank < options_.world_size; ++rank) {
        if (!store_->check({absl::StrCat("dumped/", rank)})) missing.push_back(rank);
      }
      LOG(ERROR) << "comm trace: no dump from ranks " << absl::StrJoin(missing, ", ") << " within "
                 << options_.peer_dump_wait;
    }
  } catch (const std::exception& e) {
    LOG(ERROR) << "comm trace: could not ask the other ranks to dump: " << Reason(e);
  }
}

bool CommTrace::PeerRequestPending() {
  QuietC10Warnings quiet;  // A store gone is the end of the job, told by the failing operation.
  try {
    return store_->check({kRequestKey});
  } catch (const std::exception&) {
    return false;  // The store's host is gone; nobody can ask any more.
  }
}

void CommTrace::MarkDumped() {
  if (marked_dumped_.exchange(true)) return;
  const std::string rank = absl::StrCat(options_.rank);
  store_->set(absl::StrCat("dumped/", rank), std::vector<uint8_t>(rank.begin(), rank.end()));
  store_->add(kDumpedCountKey, 1);
}

void CommTrace::Watch() {
  while (!stop_) {
    pollfd wake{wake_pipe_[0], POLLIN, 0};
    const int ready = poll(&wake, 1, static_cast<int>(absl::ToInt64Milliseconds(kWatchInterval)));
    if (stop_) return;
    if (ready > 0) {
      char bytes[16];
      const ssize_t n = read(wake_pipe_[0], bytes, sizeof(bytes));
      if (n > 0 && std::find(bytes, bytes + n, 's') != bytes + n) {
        if (absl::Status dumped = Dump("SIGUSR1"); !dumped.ok()) LOG(ERROR) << dumped.message();
      }
    }
    if (store_ && !answered_request_ && PeerRequestPending()) {
      answered_request_ = true;
      std::string why;
      QuietC10Warnings quiet;  // A failure is logged below.
      try {
        const std::vector<uint8_t> value = store_->get(kRequestKey);
        why = std::string(value.begin(), value.end());
        if (absl::Status dumped = Dump(absl::StrCat("asked by ", why)); !dumped.ok()) {
          LOG(ERROR) << dumped.message();
        }
        MarkDumped();
      } catch (const std::exception& e) {
        LOG(ERROR) << "comm trace: answering a dump request: " << Reason(e);
      }
    }
  }
}

}  // namespace titan
