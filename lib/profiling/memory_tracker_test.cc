#include "lib/profiling/memory_tracker.h"

#include <ATen/ATen.h>

#include <memory>

#include "gtest/gtest.h"
#include "lib/profiling/phase_range.h"

namespace titan {
namespace {

constexpr int64_t kFloat = 4;  // bytes per element

int64_t Bytes(const CategoryBytes& bytes, MemoryCategory category) {
  return bytes[static_cast<int>(category)];
}

std::unique_ptr<MemoryTracker> MustCreate() {
  absl::StatusOr<std::unique_ptr<MemoryTracker>> tracker =
      MemoryTracker::Create(c10::Device(c10::kCPU));
  EXPECT_TRUE(tracker.ok()) << tracker.status();
  return tracker.ok() ? std::move(*tracker) : nullptr;
}

// A step's worth of blocks whose categories and sizes are known: the timeline's peak and maxima
// must be those sums exactly (the allocator is asked for numel × 4 bytes).
TEST(MemoryTrackerTest, CategoriesFollowTagsAndRanges) {
  at::Tensor before = at::ones({1000});  // allocated before the tracker: never counted
  std::unique_ptr<MemoryTracker> tracker = MustCreate();
  ASSERT_NE(tracker, nullptr);
  at::Tensor weight = at::ones({100, 10});
  tracker->Tag(weight, MemoryCategory::kParameters);
  tracker->StartRecording();
  tracker->MarkStep(1);
  at::Tensor activation, gathered, grad, state;
  {
    PhaseRange forward("forward");
    activation = at::ones({300});
    {
      PhaseRange comm("fsdp::all_gather");  // nested: communication wins
      gathered = at::ones({50});
    }
    at::Tensor temporary = at::ones({10000});  // freed at once
  }
  {
    PhaseRange backward("backward");
    grad = at::ones({100, 10});
  }
  tracker->Tag(grad, MemoryCategory::kGradients);  // tagged after the fact: its whole life counts
  gathered.reset();
  before.reset();
  state = at::zeros({2, 100, 10});
  tracker->Tag(state, MemoryCategory::kOptimizerState);
  at::Tensor other = at::ones({20});
  const MemoryTimeline timeline = tracker->StopRecording(1000);

  // The peak is while `temporary` lived: weight + activation + gathered + temporary (more than
  // all that stays at the end).
  EXPECT_EQ(timeline.peak.total(), (1000 + 300 + 50 + 10000) * kFloat);
  EXPECT_EQ(Bytes(timeline.peak.bytes, MemoryCategory::kParameters), 1000 * kFloat);
  EXPECT_EQ(Bytes(timeline.peak.bytes, MemoryCategory::kActivations), (300 + 10000) * kFloat);
  EXPECT_EQ(Bytes(timeline.peak.bytes, MemoryCategory::kCommunication), 50 * kFloat);
  EXPECT_EQ(Bytes(timeline.max_bytes, MemoryCategory::kGradients), 1000 * kFloat);
  EXPECT_EQ(Bytes(timeline.max_bytes, MemoryCategory::kOptimizerState), 2000 * kFloat);
  EXPECT_EQ(Bytes(timeline.max_bytes, MemoryCategory::kOther), 20 * kFloat);
  // 6 allocations and 2 frees while recording (`before` was never seen).
  EXPECT_EQ(timeline.events, 8);
  ASSERT_GE(timeline.samples.size(), 2u);
  EXPECT_EQ(timeline.samples.front().total(), 1000 * kFloat);
  EXPECT_EQ(timeline.samples.back().total(), (1000 + 300 + 1000 + 2000 + 20) * kFloat);
  for (size_t i = 1; i < timeline.samples.size(); ++i) {
    EXPECT_LE(timeline.samples[i - 1].time_ms, timeline.samples[i].time_ms);
  }
  ASSERT_EQ(timeline.step_starts.size(), 1u);
  EXPECT_EQ(timeline.step_starts[0].first, 1);

  const CategoryBytes live = tracker->LiveBytes();
  EXPECT_EQ(Bytes(live, MemoryCategory::kOptimizerState), 2000 * kFloat);
  activation.reset();
  EXPECT_EQ(Bytes(tracker->LiveBytes(), MemoryCategory::kActivations), 0);
}

// Thinning keeps each slice's highest total, so the plotted peak is the true one.
TEST(MemoryTrackerTest, ThinnedTimelineKeepsThePeak) {
  std::unique_ptr<MemoryTracker> tracker = MustCreate();
  ASSERT_NE(tracker, nullptr);
  tracker->StartRecording();
  for (int i = 0; i < 200; ++i) {
    at::Tensor t = at::ones({i == 137 ? 5000 : 10});
  }
  const MemoryTimeline timeline = tracker->StopRecording(8);
  EXPECT_EQ(timeline.events, 400);
  EXPECT_LE(timeline.samples.size(), 8u + 3);
  int64_t highest = 0;
  for (const MemorySample& s : timeline.samples) highest = std::max(highest, s.total());
  EXPECT_EQ(highest, 5000 * kFloat);
  EXPECT_EQ(timeline.peak.total(), 5000 * kFloat);
}

TEST(MemoryTrackerTest, OneTrackerAtATime) {
  std::unique_ptr<MemoryTracker> first = MustCreate();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(MemoryTracker::Create(c10::Device(c10::kCPU)).status().message(),
            "a MemoryTracker already exists in this process");
  first.reset();
  EXPECT_NE(MustCreate(), nullptr);
}

}  // namespace
}  // namespace titan
