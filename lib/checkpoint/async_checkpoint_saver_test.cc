#include "lib/checkpoint/async_checkpoint_saver.h"

#include <chrono>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/test_dir.h"
#include "lib/profiling/tracking_allocator.h"
#include "lib/util/directory.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A fresh directory per test.
std::string TestRoot() { return TestDir("root"); }

class AsyncCheckpointSaverTest : public ::testing::TestWithParam<CheckpointStaging> {};

TEST_P(AsyncCheckpointSaverTest, SavesTheValuesOfStartWhileTheCallerChangesThem) {
  CheckpointManager manager(TestRoot(), 0);
  AsyncCheckpointSaver saver(&manager, 0.25, GetParam());
  CheckpointState state;
  state.model = {{"w", at::randn({256, 256})}};
  state.optimizer = {{"w.exp_avg", at::randn({256, 256})}};
  state.extra = {{"step", 1}};
  const at::Tensor expected_w = state.model[0].second.clone();
  const at::Tensor expected_avg = state.optimizer[0].second.clone();

  ASSERT_TRUE(saver.Start(1, state, /*model_only=*/false).ok());
  EXPECT_TRUE(saver.in_flight());
  state.model[0].second.add_(1);  // The next training step, while the save runs.
  state.optimizer[0].second.zero_();
  EXPECT_EQ(saver.Start(2, state, false).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(saver.Wait().ok());
  EXPECT_FALSE(saver.in_flight());

  absl::StatusOr<CheckpointState> loaded = manager.Load(1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->model[0].second.equal(expected_w));
  EXPECT_TRUE(loaded->optimizer[0].second.equal(expected_avg));
  EXPECT_EQ(loaded->extra, state.extra);

  ASSERT_TRUE(saver.Start(2, state, /*model_only=*/true).ok());
  ASSERT_TRUE(saver.Wait().ok());
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(1, 2));
  EXPECT_TRUE(saver.Wait().ok());  // Nothing in flight.
}

// Reused buffers: a later save copies into the first one's host memory (no new allocation) and
// still writes its own values; a fresh copy per save allocates one each time.
TEST_P(AsyncCheckpointSaverTest, ReusedBuffersAllocateOnlyForTheFirstSave) {
  TrackingAllocator& allocator = TrackingAllocator::Install();
  CheckpointManager manager(TestRoot(), 0);
  AsyncCheckpointSaver saver(&manager, 0.25, GetParam());
  CheckpointState state;
  state.model = {{"w", at::zeros({256, 256})}};
  const int64_t bytes = 256 * 256 * 4;
  for (int64_t step = 1; step <= 3; ++step) {
    state.model[0].second.fill_(static_cast<double>(step));
    const int64_t live = allocator.live();
    allocator.ResetPeak();
    ASSERT_TRUE(saver.Start(step, state, /*model_only=*/false).ok());
    const int64_t staged = allocator.peak() - live;
    ASSERT_TRUE(saver.Wait().ok());
    if (GetParam() == CheckpointStaging::kCopyPerSave || step == 1) {
      EXPECT_GE(staged, bytes) << "step " << step;
    } else {
      EXPECT_LT(staged, bytes / 4) << "step " << step;
    }
  }
  for (int64_t step = 1; step <= 3; ++step) {
    absl::StatusOr<CheckpointState> loaded = manager.Load(step);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(loaded->model[0].second.eq(static_cast<double>(step)).all().item<bool>());
  }
}

TEST_P(AsyncCheckpointSaverTest, WaitReturnsTheFailure) {
  CheckpointManager manager(TestRoot(), 0);
  AsyncCheckpointSaver saver(&manager, 0.25, GetParam());
  CheckpointState state;
  state.model = {{"w", at::ones({2})}, {"w", at::ones({2})}};
  ASSERT_TRUE(saver.Start(1, state, true).ok());
  EXPECT_THAT(saver.Wait().message(), HasSubstr("duplicate name"));
  EXPECT_TRUE(manager.ListSteps()->empty());
}

// Rank 0 of 2 whose rank 1 died mid-save: a saver destroyed without Wait() (the caller is ending
// with an error) gives up the commit that waits for rank 1's files, long before the commit timeout.
TEST_P(AsyncCheckpointSaverTest, DestroyingTheSaverGivesUpWaitingForADeadRank) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, 0, {0, 2, "dying-run", /*commit_timeout=*/absl::Seconds(60)});
  CheckpointState state;
  state.model = {{"w", at::randn({64, 64})}};
  std::chrono::steady_clock::time_point start;
  {
    AsyncCheckpointSaver saver(&manager, 0.25, GetParam());
    ASSERT_TRUE(saver.Start(20, state, /*model_only=*/false).ok());
    // Rank 0's own record is in: it now waits for rank 1's.
    const std::string record = root + "/step-20.tmp-dying-run/rank-00000.json";
    for (int i = 0; i < 3000 && !PathExists(record); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(PathExists(record));
    start = std::chrono::steady_clock::now();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20) << "waited for the dead rank's files";
  EXPECT_THAT(*manager.ListSteps(), IsEmpty());
  EXPECT_THAT(manager.UncommittedStepFolders(), ElementsAre("step-20.tmp-dying-run"));
}

// GiveUp, then Wait: the save's outcome is Cancelled; the next save waits again as usual.
TEST_P(AsyncCheckpointSaverTest, WaitAfterGiveUpReturnsCancelled) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, 0, {0, 2, "dying-run", /*commit_timeout=*/absl::Seconds(60)});
  AsyncCheckpointSaver saver(&manager, 0.25, GetParam());
  CheckpointState state;
  state.model = {{"w", at::randn({64, 64})}};
  ASSERT_TRUE(saver.Start(20, state, /*model_only=*/false).ok());
  saver.GiveUp();
  const absl::Status status = saver.Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank(s) 1"));
  EXPECT_FALSE(saver.in_flight());
}

// One process: destroying the saver still commits the save in flight (it waits for no rank).
TEST_P(AsyncCheckpointSaverTest, DestroyingTheSaverStillCommitsASaveOfOneProcess) {
  CheckpointManager manager(TestRoot(), 0);
  CheckpointState state;
  state.model = {{"w", at::randn({256, 256})}};
  {
    AsyncCheckpointSaver saver(&manager, 0.25, GetParam());
    ASSERT_TRUE(saver.Start(20, state, /*model_only=*/false).ok());
  }
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(20));
}

INSTANTIATE_TEST_SUITE_P(Staging, AsyncCheckpointSaverTest,
                         ::testing::Values(CheckpointStaging::kCopyPerSave,
                                           CheckpointStaging::kReusedPinnedBuffers));

}  // namespace
}  // namespace titan
