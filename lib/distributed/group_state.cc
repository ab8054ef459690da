#include "lib/distributed/group_state.h"

#include <c10/util/Exception.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "lib/distributed/deadline_watch.h"
#include "lib/util/c10_log_filter.h"

namespace titan {

std::string Reason(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  const std::string text = c10_error != nullptr ? c10_error->what_without_backtrace() : e.what();
  return std::string(absl::string_view(text).substr(0, text.find('\n')));
}

namespace {

// Counts the members whose failure reports have read the group's store.
constexpr char kReportedKey[] = "reported";

// One thread per process publishes every live group's progress each period.
class ProgressPublisher {
 public:
  static ProgressPublisher& Get() {
    static auto* publisher = new ProgressPublisher();  // outlives every group: never destroyed
    return *publisher;
  }
  void Add(GroupState* group) {
    std::lock_guard<std::mutex> lock(mutex_);
    groups_.insert(group);
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  void Remove(GroupState* group) {
    std::lock_guard<std::mutex> lock(mutex_);  // waits for a publication in progress
    groups_.erase(group);
  }

 private:
  void Run() {
    const int64_t periods_per_heartbeat =
        GroupState::kHeartbeatPeriod / GroupState::kProgressPeriod;
    for (int64_t period = 0;; ++period) {
      // Timed around the sleep alone: a store call that waits on a stopped host is no stall here.
      const auto before = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(absl::ToChronoMilliseconds(GroupState::kProgressPeriod));
      const absl::Duration slept = absl::FromChrono(std::chrono::steady_clock::now() - before);
      std::lock_guard<std::mutex> lock(mutex_);
      for (GroupState* group : groups_) {
        if (slept > GroupState::kSilenceWindow) group->PublishStall(absl::Now(), slept);
        group->PublishProgress();
        if (period % periods_per_heartbeat == 0) group->PublishHeartbeat();
      }
    }
  }

  std::mutex mutex_;
  absl::flat_hash_set<GroupState*> groups_;
  std::thread thread_;
};

// The reports that members still make after a failure read the store this process hosts; at its
// exit (a failure ends the job) it waits for them, bounded, rather than take the store along.
class ReportLinger {
 public:
  static ReportLinger& Get() {
    static auto* linger = new ReportLinger();  // used at exit: never destroyed
    return *linger;
  }
  // Waits at exit until `readers` members have counted themselves in `progress`'s key.
  void Expect(c10::intrusive_ptr<c10d::Store> progress, int readers) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (waits_.empty()) std::atexit([] { Get().WaitForReaders(); });
    waits_.emplace_back(std::move(progress), readers);
  }

 private:
  void WaitForReaders() {
    std::lock_guard<std::mutex> lock(mutex_);
    const absl::Time deadline = absl::Now() + GroupState::kReportLinger;
    QuietC10Warnings quiet;  // Nothing is left to tell: the reports were made.
    for (const auto& [progress, readers] : waits_) {
      try {
        while (progress->add(kReportedKey, 0) < readers && absl::Now() < deadline) {
          absl::SleepFor(absl::Milliseconds(50));
        }
      } catch (const std::exception&) {
      }
    }
  }

  std::mutex mutex_;
  // The stores hold the hosted server up until the process ends.
  std::vector<std::pair<c10::intrusive_ptr<c10d::Store>, int>> waits_;
};

}  // namespace

GroupState::GroupState(std::string name, std::vector<int> global_ranks, int rank,
                       c10::intrusive_ptr<c10d::Store> progress)
    : name_(std::move(name)),
      global_ranks_(std::move(global_ranks)),
      rank_(rank),
      progress_(std::move(progress)) {
  ProgressPublisher::Get().Add(this);
}

GroupState::~GroupState() { ProgressPublisher::Get().Remove(this); }

void GroupState::PublishProgress() {
  std::lock_guard<std::mutex> lock(publish_mutex_);
  const int64_t arrived = static_cast<int64_t>(arrived_.load(std::memory_order_relaxed));
  if (arrived == published_) return;
  const std::string value = absl::StrCat(arrived);
  QuietC10Warnings quiet;  // A failure is the straggler report's to tell.
  try {
    progress_->set(absl::StrCat(rank_), std::vector<uint8_t>(value.begin(), value.end()));
    published_ = arrived;
  } catch (const std::exception& e) {
    // The store went away (the job is ending); the straggler report will say so.
  }
}

void GroupState::PublishHeartbeat() {
  std::lock_guard<std::mutex> lock(publish_mutex_);
  const std::string value = absl::StrCat(++heartbeats_);
  QuietC10Warnings quiet;  // A failure is the straggler report's to tell.
  try {
    progress_->set(absl::StrCat("alive/", rank_), std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    // The store went away (the job is ending); the straggler report will say so.
  }
}

void GroupState::PublishStall(absl::Time end, absl::Duration length) {
  std::lock_guard<std::mutex> lock(publish_mutex_);
  const std::string value =
      absl::StrCat(absl::ToUnixMillis(end), " ", absl::ToInt64Milliseconds(length));
  QuietC10Warnings quiet;  // A failure is the straggler report's to tell.
  try {
    progress_->set(absl::StrCat("stalled/", rank_),
                   std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    // The store went away (the job is ending); the straggler report will say so.
  }
}

std::vector<int> GroupState::MembersBelow(uint64_t seq) {
  std::vector<int> missing;
  for (size_t member = 0; member < global_ranks_.size(); ++member) {
    const std::string key = absl::StrCat(member);
    int64_t reached = -1;  // Not even joined.
    if (progress_->check({key})) {
      const std::vector<uint8_t> value = progress_->get(key);
      if (!absl::SimpleAtoi(std::string(value.begin(), value.end()), &reached)) reached = -1;
    }
    if (reached < static_cast<int64_t>(seq)) missing.push_back(global_ranks_[member]);
  }
  return missing;
}

std::vector<std::string> GroupState::HeartbeatCounts() {
  std::vector<std::string> counts(global_ranks_.size());
  for (size_t member = 0; member < global_ranks_.size(); ++member) {
    const std::string key = absl::StrCat("alive/", member);
    if (static_cast<int>(member) == rank_ || !progress_->check({key})) continue;
    const std::vector<uint8_t> value = progress_->get(key);
    counts[member].assign(value.begin(), value.end());
  }
  return counts;
}

std::vector<int> GroupState::SilentMembers() {
  const std::vector<std::string> before = HeartbeatCounts();
  absl::SleepFor(kSilenceWindow);
  const std::vector<std::string> after = HeartbeatCounts();
  std::vector<int> silent;
  for (size_t member = 0; member < global_ranks_.size(); ++member) {
    if (static_cast<int>(member) != rank_ && after[member] == before[member]) {
      silent.push_back(global_ranks_[member]);
    }
  }
  return silent;
}

std::string GroupState::StalledMembers(absl::Time since) {
  std::vector<std::string> stalled;
  for (size_t member = 0; member < global_ranks_.size(); ++member) {
    const std::string key = absl::StrCat("stalled/", member);
    if (!progress_->check({key})) continue;
    const std::vector<uint8_t> value = progress_->get(key);
    const std::vector<std::string> fields =
        absl::StrSplit(std::string(value.begin(), value.end()), ' ');
    int64_t end_ms = 0;
    int64_t length_ms = 0;
    if (fields.size() != 2 || !absl::SimpleAtoi(fields[0], &end_ms) ||
        !absl::SimpleAtoi(fields[1], &length_ms) || absl::FromUnixMillis(end_ms) < since) {
      continue;
    }
    stalled.push_back(absl::StrCat(
        global_ranks_[member], " for ",
        absl::FormatDuration(absl::Trunc(absl::Milliseconds(length_ms), absl::Milliseconds(100)))));
  }
  return absl::StrJoin(stalled, ", ");
}

std::string GroupState::Stragglers(uint64_t seq, absl::Time start, int* readers) {
  if (readers != nullptr) *readers = 0;
  PublishProgress();
  // Let every member's publisher run once, so a value is at most one period old.
  absl::SleepFor(2 * kProgressPeriod);
  QuietC10Warnings quiet;  // A failure is told below.
  try {
    const std::vector<int> missing = MembersBelow(seq);
    if (readers != nullptr) *readers = size();
    if (!missing.empty()) {
      return absl::StrCat("ranks that did not arrive: ", absl::StrJoin(missing, ", "));
    }
    // A member killed inside the collective had arrived: name it by its stopped heartbeat.
    const std::vector<int> silent = SilentMembers();
    if (readers != nullptr) *readers = size() - static_cast<int>(silent.size());
    // Read after the silence window: a member continued just now has published its stall by then.
    const std::string stalled = StalledMembers(start);
    if (silent.empty() && stalled.empty()) return "every rank arrived and is alive";
    std::string text = "every rank arrived";
    if (!silent.empty()) {
      absl::StrAppend(&text, "; ranks silent for the last ", absl::FormatDuration(kSilenceWindow),
                      " (died, stopped or exited): ", absl::StrJoin(silent, ", "));
    }
    if (!stalled.empty()) {
      absl::StrAppend(&text,
                      "; ranks stalled while it ran (the process stopped, as by SIGSTOP, or "
                      "starved of CPU): ",
                      stalled);
    }
    return text;
  } catch (const std::exception& e) {
    // Rank 0's own store answers while it lives: on another rank, unreachable means it ended.
    const bool host_gone = global_ranks_[rank_] != 0;
    return absl::StrCat("ranks that did not arrive: unknown (the store, hosted by rank 0, is ",
                        host_gone ? "gone: rank 0 died or exited" : "unreachable", ": ", Reason(e),
                        ")");
  }
}

absl::Status GroupState::Failure(absl::string_view op, uint64_t seq, absl::Time start,
                                 absl::string_view reason, absl::Time end) {
  // FormatDuration writes a zero duration as "0", without a unit.
  const absl::Duration elapsed = absl::Trunc(end - start, absl::Milliseconds(1));
  const std::string failure = absl::StrCat(
      op, " #", seq, " on group \"", name_, "\" (job ranks ", absl::StrJoin(global_ranks_, ","),
      ") failed after ", elapsed == absl::ZeroDuration() ? "0ms" : absl::FormatDuration(elapsed),
      ": ", reason);
  std::string stragglers;
  int readers = 0;
  AskStoreAfterFailure(failure, [&] {
    stragglers = Stragglers(seq, start, &readers);
    if (readers == 0 || reported_.exchange(true)) return;
    QuietC10Warnings quiet;  // The host counts who read; a store gone has nobody to count.
    try {
      progress_->add(kReportedKey, 1);
    } catch (const std::exception&) {
    }
  });
  if (readers > 0 && global_ranks_[rank_] == 0) ReportLinger::Get().Expect(progress_, readers);
  return absl::DeadlineExceededError(absl::StrCat(failure, "; ", stragglers));
}

void AskStoreAfterFailure(absl::string_view failure, const std::function<void()>& ask) {
  const std::string message = absl::StrCat(program_invocation_short_name, ": ", failure,
                                           "; the store (hosted by rank 0) gave no answer within ",
                                           absl::FormatDuration(kStoreAnswerTimeout),
                                           " either: rank 0 may be the stuck rank\n");
  RunWithDeadline(kStoreAnswerTimeout, ask, [&message] {
    // Not glog: its lock may be held by the thread that waits on the store.
    std::fputs(message.c_str(), stderr);
    std::fflush(stderr);
    std::_Exit(1);
  });
}

absl::Status CheckCollectiveTensor(const GroupState& group, const char* op, const char* what,
                                   const at::Tensor& tensor, c10::DeviceType device,
                                   const char* backend) {
  if (!tensor.defined() || tensor.device().type() != device || !tensor.is_contiguous() ||
      tensor.is_sparse()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " on group \"", group.name(), "\": ", what, " must be a defined, dense, contiguous ",
        c10::DeviceTypeName(device), " tensor (", backend, " backend)"));
  }
  return absl::OkStatus();
}

absl::Status CheckCollectivePair(const GroupState& group, const char* op, const at::Tensor& small,
                                 const at::Tensor& big, int64_t expected, const char* expected_text,
                                 c10::DeviceType device, const char* backend) {
  if (absl::Status s = CheckCollectiveTensor(group, op, "input", small, device, backend); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckCollectiveTensor(group, op, "output", big, device, backend); !s.ok()) {
    return s;
  }
  if (small.scalar_type() != big.scalar_type()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " on group \"", group.name(), "\": input and output dtypes differ (",
        c10::toString(small.scalar_type()), " vs ", c10::toString(big.scalar_type()), ")"));
  }
  if (big.numel() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(op, " on group \"", group.name(),
                                                   "\": expected ", expected, " (", expected_text,
                                                   ") elements, got ", big.numel()));
  }
  return absl::OkStatus();
}

absl::Status CheckCollectivePeer(const GroupState& group, const char* op, const char* what,
                                 int peer, bool self_ok) {
  if (peer < 0 || peer >= group.size() || (!self_ok && peer == group.rank())) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " on group \"", group.name(), "\": ", what, " ", peer, " is not another member of 0..",
        group.size() - 1, " (this member is ", group.rank(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace titan
