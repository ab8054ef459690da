#include "lib/checkpoint/async_checkpoint_saver.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/test_dir.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A fresh directory per test.
std::string TestRoot() { return TestDir("root"); }

TEST(AsyncCheckpointSaverTest, SavesTheValuesOfStartWhileTheCallerChangesThem) {
  CheckpointManager manager(TestRoot(), 0);
  AsyncCheckpointSaver saver(&manager);
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

TEST(AsyncCheckpointSaverTest, WaitReturnsTheFailure) {
  CheckpointManager manager(TestRoot(), 0);
  AsyncCheckpointSaver saver(&manager);
  CheckpointState state;
  state.model = {{"w", at::ones({2})}, {"w", at::ones({2})}};
  ASSERT_TRUE(saver.Start(1, state, true).ok());
  EXPECT_THAT(saver.Wait().message(), HasSubstr("duplicate name"));
  EXPECT_TRUE(manager.ListSteps()->empty());
}

}  // namespace
}  // namespace titan
