#include "lib/distributed/deadline_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>

#include "absl/synchronization/notification.h"

namespace titan {
namespace {

TEST(RunWithDeadlineTest, WorkThatReturnsInTimeIsNotReported) {
  std::atomic<int> expired{0};
  bool ran = false;
  RunWithDeadline(
      absl::Seconds(30), [&] { ran = true; }, [&] { ++expired; });
  EXPECT_TRUE(ran);
  EXPECT_EQ(expired.load(), 0);
}

TEST(RunWithDeadlineTest, BlockedWorkIsReportedOnceWhileItStillRuns) {
  // The work waits for on_expiry, as a connection would for a rank that died: without the watcher
  // this test would hang.
  absl::Notification expired;
  std::atomic<int> calls{0};
  const absl::Time start = absl::Now();
  RunWithDeadline(
      absl::Milliseconds(100), [&] { expired.WaitForNotification(); },
      [&] {
        ++calls;
        expired.Notify();
      });
  EXPECT_EQ(calls.load(), 1);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST(RunWithDeadlineTest, WorkThatThrowsStopsTheWatcher) {
  std::atomic<int> expired{0};
  EXPECT_THROW(
      RunWithDeadline(
          absl::Seconds(30), [] { throw std::runtime_error("refused"); }, [&] { ++expired; }),
      std::runtime_error);
  EXPECT_EQ(expired.load(), 0);
}

}  // namespace
}  // namespace titan
