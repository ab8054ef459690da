#include "lib/distributed/group_state.h"

#include <c10/util/intrusive_ptr.h>

#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/util/c10_log_filter.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

// A store hosted in this process (rank 0's part) and a client's connection to it (another rank's).
struct HostedStore {
  c10::intrusive_ptr<c10d::TCPStore> host;
  c10::intrusive_ptr<c10d::TCPStore> client;
};

HostedStore HostStore() {
  c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  HostedStore store;
  store.host = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  options.port = store.host->getPort();
  options.isServer = false;
  store.client = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  return store;
}

// Rank 0 closes the store as the job ends (or dies) while rank 1 still publishes its progress and
// asks who arrived: c10d's client would log each failed call with a C++ backtrace.
TEST(GroupStateTest, AStoreWhoseHostEndedFailsQuietlyAndNamesRankZero) {
  FilterC10LogOutput();
  HostedStore store = HostStore();
  GroupState group("dp", {0, 1}, /*rank=*/1,
                   c10::make_intrusive<c10d::PrefixStore>("titan/progress/dp", store.client));
  group.MarkArrived(1);
  group.PublishProgress();
  store.host.reset();
  testing::internal::CaptureStderr();
  group.MarkArrived(2);
  group.PublishProgress();
  const std::string stragglers = group.Stragglers(2, absl::Now());
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_THAT(stragglers, HasSubstr("ranks that did not arrive: unknown (the store, hosted by rank "
                                    "0, is gone: rank 0 died or exited: "));
  EXPECT_EQ(printed, "");
}

// How long the operation ran, with a unit even when it failed at once (a peer already gone).
TEST(GroupStateTest, AFailureSaysHowLongTheOperationRan) {
  FilterC10LogOutput();
  HostedStore store = HostStore();
  GroupState group("pp", {0, 1}, /*rank=*/1,
                   c10::make_intrusive<c10d::PrefixStore>("titan/progress/pp", store.client));
  store.host.reset();
  const absl::Time start = absl::Now();
  EXPECT_THAT(group.Failure("batch_p2p", 3, start, "closed by peer", start).message(),
              HasSubstr("batch_p2p #3 on group \"pp\" (job ranks 0,1) failed after 0ms: closed "
                        "by peer; "));
  EXPECT_THAT(
      group.Failure("all_reduce", 4, start, "timed out", start + absl::Milliseconds(1500))
          .message(),
      HasSubstr("all_reduce #4 on group \"pp\" (job ranks 0,1) failed after 1.5s: timed out; "));
}

// Rank 1 arrived at the collective and was then killed inside it: its progress says it arrived,
// its heartbeat stands still. Rank 2 lives.
TEST(GroupStateTest, AMemberThatArrivedAndDiedIsNamedSilent) {
  FilterC10LogOutput();
  HostedStore store = HostStore();
  auto progress = [&] {
    return c10::make_intrusive<c10d::PrefixStore>("titan/progress/dp", store.client);
  };
  GroupState reporter("dp", {0, 1, 2}, /*rank=*/0, progress());
  GroupState alive("dp", {0, 1, 2}, /*rank=*/2, progress());
  {
    GroupState killed("dp", {0, 1, 2}, /*rank=*/1, progress());
    for (GroupState* group : {&reporter, &killed, &alive}) {
      group->MarkArrived(7);
      group->PublishProgress();
      group->PublishHeartbeat();
    }
  }  // Its publisher stops, as a dead process's would.
  EXPECT_EQ(reporter.Stragglers(7, absl::Now()),
            "every rank arrived; ranks silent for the last 2s (died, stopped or exited): 1");
}

TEST(GroupStateTest, MembersThatArrivedAndLiveAreNotCalledSilent) {
  FilterC10LogOutput();
  HostedStore store = HostStore();
  auto progress = [&] {
    return c10::make_intrusive<c10d::PrefixStore>("titan/progress/dp", store.client);
  };
  GroupState reporter("dp", {0, 1}, /*rank=*/0, progress());
  GroupState peer("dp", {0, 1}, /*rank=*/1, progress());
  for (GroupState* group : {&reporter, &peer}) group->MarkArrived(3);
  EXPECT_EQ(reporter.Stragglers(3, absl::Now()), "every rank arrived and is alive");
  EXPECT_EQ(reporter.Stragglers(4, absl::Now()), "ranks that did not arrive: 0, 1");
}

// Rank 0 was stopped (SIGSTOP) while rank 1 waited in the collective, and continued after rank 1
// gave up: it arrived and lives, so only its stall, which ended after the operation started,
// names it. A stall that ended before is no concern of this operation.
TEST(GroupStateTest, AMemberStalledDuringTheOperationIsNamed) {
  FilterC10LogOutput();
  HostedStore store = HostStore();
  auto progress = [&] {
    return c10::make_intrusive<c10d::PrefixStore>("titan/progress/dp", store.client);
  };
  GroupState stalled("dp", {0, 1}, /*rank=*/0, progress());
  GroupState reporter("dp", {0, 1}, /*rank=*/1, progress());
  for (GroupState* group : {&stalled, &reporter}) group->MarkArrived(5);
  const absl::Time start = absl::Now();
  stalled.PublishStall(start - absl::Seconds(1), absl::Seconds(3));
  EXPECT_EQ(reporter.Stragglers(5, start), "every rank arrived and is alive");
  stalled.PublishStall(start + absl::Seconds(4), absl::Milliseconds(6240));
  EXPECT_EQ(reporter.Stragglers(5, start),
            "every rank arrived; ranks stalled while it ran (the process stopped, as by SIGSTOP, "
            "or starved of CPU): 0 for 6.2s");
}

}  // namespace
}  // namespace titan
