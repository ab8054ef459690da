#ifndef TITAN_LIB_DISTRIBUTED_GROUP_STATE_H_
#define TITAN_LIB_DISTRIBUTED_GROUP_STATE_H_

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace titan {

// The first line of an exception's text (c10 errors carry a C++ backtrace after it).
std::string Reason(const std::exception& e);

// How long a member that saw a collective fail waits for the store's answers (stragglers, dump
// requests): c10d's TCPStore client waits for an answer without a timeout, and the store's host
// (rank 0) may be the stuck rank.
inline constexpr absl::Duration kStoreAnswerTimeout = absl::Seconds(20);

// Runs `ask` (store calls after `failure`, a collective's); if it has not returned within
// kStoreAnswerTimeout, prints `failure` with why and ends the process with status 1, so that the
// launcher or scheduler ends the job instead of waiting on the stuck store with it.
void AskStoreAfterFailure(absl::string_view failure, const std::function<void()>& ask);

// What a group's members and its Work handles share, whatever the backend: identity, and the
// progress keys that tell who reached which operation. Before operation #n each member records n;
// a background thread publishes the newest value as "<its group rank>" = n in the group's progress
// store every kProgressPeriod (no store round trip per collective); on failure, members whose
// value is below n never arrived. Every kHeartbeatPeriod the thread also counts up
// "alive/<group rank>", so that when every member arrived, the ones whose count stands still (a
// rank killed inside the collective) are named; and a thread whose period overran by more than
// kSilenceWindow (the process was stopped, as by SIGSTOP, then continued) writes
// "stalled/<group rank>", so that a member that arrived late, but lives, is named too.
class GroupState {
 public:
  static constexpr absl::Duration kProgressPeriod = absl::Milliseconds(50);
  static constexpr absl::Duration kHeartbeatPeriod = absl::Milliseconds(500);
  // How long a count must stand still for its member to be called silent.
  static constexpr absl::Duration kSilenceWindow = absl::Seconds(2);  // 4 heartbeats
  // How long the store's host waits at exit for the members' reports after a failure.
  static constexpr absl::Duration kReportLinger = absl::Seconds(10);

  GroupState(std::string name, std::vector<int> global_ranks, int rank,
             c10::intrusive_ptr<c10d::Store> progress);
  ~GroupState();
  GroupState(const GroupState&) = delete;
  GroupState& operator=(const GroupState&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  int rank() const { return rank_; }
  int size() const { return static_cast<int>(global_ranks_.size()); }

  // Records that this member reached operation #seq (published within kProgressPeriod).
  void MarkArrived(uint64_t seq) { arrived_.store(seq, std::memory_order_relaxed); }
  // Writes the newest value to the store now, if it changed; the publisher calls it.
  void PublishProgress();
  // Counts this member's "alive/<group rank>" up by one; the publisher calls it.
  void PublishHeartbeat();
  // Records that this process stood still for `length` until `end`; the publisher calls it.
  void PublishStall(absl::Time end, absl::Duration length);
  // "ranks that did not arrive: 2, 5" (job ranks); when every member arrived, those silent for
  // kSilenceWindow and those stalled until after `start` (the operation's); or why that cannot be
  // told. Publishes this member's progress and gives the others a publishing period first. The
  // members not found silent (that will read the store for their own reports) into *readers
  // where given; 0 when the store cannot be read.
  std::string Stragglers(uint64_t seq, absl::Time start, int* readers = nullptr);
  // DeadlineExceeded naming the operation, the group, how long it ran (`start` to `end`, when it
  // failed: a trace dump exchange after it does not count) and the stragglers. The store's host
  // (job rank 0) then stays up at exit, up to kReportLinger, until the other members' reports
  // have read its store: an exit before would leave them "the store ... is gone".
  absl::Status Failure(absl::string_view op, uint64_t seq, absl::Time start,
                       absl::string_view reason, absl::Time end = absl::Now());

 private:
  const std::string name_;
  const std::vector<int> global_ranks_;
  const int rank_;
  // Members (job ranks) whose progress is below `seq`. Throws what the store throws.
  std::vector<int> MembersBelow(uint64_t seq);
  // Other members whose heartbeat count stood still for kSilenceWindow. Throws as the store.
  std::vector<int> SilentMembers();
  // Each other member's heartbeat count ("" where it has none).
  std::vector<std::string> HeartbeatCounts();
  // "0 for 6.2s, 3 for 2.5s": members (this one included) whose stall ended after `since`.
  // Throws as the store.
  std::string StalledMembers(absl::Time since);

  const c10::intrusive_ptr<c10d::Store> progress_;
  std::atomic<uint64_t> arrived_{0};
  std::mutex publish_mutex_;
  int64_t published_ = -1;  // the value in the store; -1: none yet
  int64_t heartbeats_ = 0;
  std::atomic<bool> reported_{false};  // This member's report has read the store.
};

// Argument checks every backend makes; errors name the operation, the group and the backend.
// A defined, dense, contiguous tensor on `device`.
absl::Status CheckCollectiveTensor(const GroupState& group, const char* op, const char* what,
                                   const at::Tensor& tensor, c10::DeviceType device,
                                   const char* backend);
// Both tensors valid, one dtype, and `big` holding `expected` elements.
absl::Status CheckCollectivePair(const GroupState& group, const char* op, const at::Tensor& small,
                                 const at::Tensor& big, int64_t expected, const char* expected_text,
                                 c10::DeviceType device, const char* backend);
// `peer` is a member (another one unless self_ok).
absl::Status CheckCollectivePeer(const GroupState& group, const char* op, const char* what,
                                 int peer, bool self_ok);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_GROUP_STATE_H_
