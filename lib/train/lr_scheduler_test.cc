#include "lib/train/lr_scheduler.h"

#include <cmath>

#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(LrScheduleTest, LinearWarmupThenStableThenLinearDecay) {
  // 10 steps: 2 warmup, decay_ratio 0.5 -> 5 decay steps, 4 stable (torchtitan's +1 convention).
  auto s = WarmupStableDecaySchedule::Create(10, 2, 0.5, "linear", 0.0).value();
  EXPECT_DOUBLE_EQ(s.Factor(0), 0.5);
  EXPECT_DOUBLE_EQ(s.Factor(1), 1.0);
  EXPECT_DOUBLE_EQ(s.Factor(2), 1.0);
  EXPECT_DOUBLE_EQ(s.Factor(5), 1.0);
  EXPECT_DOUBLE_EQ(s.Factor(6), 1.0 - 1.0 / 5);
  EXPECT_DOUBLE_EQ(s.Factor(9), 1.0 - 4.0 / 5);
  EXPECT_DOUBLE_EQ(s.Factor(10), 0.0);
}

TEST(LrScheduleTest, CosineAndSqrtRespectMinFactor) {
  // No decay_ratio: decay spans all steps after warmup; torchtitan's "+1" keeps one stable step.
  auto cosine = WarmupStableDecaySchedule::Create(10, 0, -1, "cosine", 0.1).value();
  EXPECT_EQ(cosine.decay_steps(), 10);
  EXPECT_DOUBLE_EQ(cosine.Factor(0), 1.0);
  EXPECT_NEAR(cosine.Factor(4), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.4)), 1e-12);
  EXPECT_NEAR(cosine.Factor(10), 0.1, 1e-12);
  auto sqrt = WarmupStableDecaySchedule::Create(4, 0, 1.0, "sqrt", 0.0).value();
  EXPECT_NEAR(sqrt.Factor(1), 1 - std::sqrt(0.25), 1e-12);
}

TEST(LrScheduleTest, PastTheEndOfDecayStaysAtMinFactor) {
  // A resumed schedule can run ahead of the step count: linear and sqrt must not go negative,
  // cosine must not climb back to the peak.
  for (const char* type : {"linear", "sqrt", "cosine"}) {
    auto s = WarmupStableDecaySchedule::Create(10, 2, 0.5, type, 0.0).value();
    auto floor = WarmupStableDecaySchedule::Create(10, 2, 0.5, type, 0.25).value();
    for (int64_t step : {10, 11, 15, 19, 100}) {
      EXPECT_DOUBLE_EQ(s.Factor(step), 0.0) << type << " step " << step;
      EXPECT_DOUBLE_EQ(floor.Factor(step), 0.25) << type << " step " << step;
    }
  }
  // Without decay steps the rate stays at the peak.
  auto no_decay = WarmupStableDecaySchedule::Create(10, 20, 0.5, "linear", 0.0).value();
  EXPECT_DOUBLE_EQ(no_decay.Factor(11), 1.0);
  EXPECT_DOUBLE_EQ(no_decay.Factor(50), 1.0);
}

TEST(LrScheduleTest, WarmupIsCappedAtTheRunAndDecayGetsWhatIsLeft) {
  // torchtitan caps warmup at the total, then shortens decay to the steps warmup leaves.
  auto s = WarmupStableDecaySchedule::Create(10, 20, 0.5, "linear", 0.0).value();
  EXPECT_EQ(s.warmup_steps(), 10);
  EXPECT_EQ(s.decay_steps(), 0);
  EXPECT_EQ(s.stable_steps(), 1);
  EXPECT_DOUBLE_EQ(s.Factor(9), 1.0);
  auto t = WarmupStableDecaySchedule::Create(10, 7, 0.5, "linear", 0.0).value();
  EXPECT_EQ(t.warmup_steps(), 7);
  EXPECT_EQ(t.decay_steps(), 3);
}

TEST(LrScheduleTest, DecayStepsRoundHalfToEvenAsPython) {
  // 10 × 0.25 = 2.5 and 6 × 0.75 = 4.5: Python's round() gives 2 and 4 (llround: 3 and 5).
  EXPECT_EQ(WarmupStableDecaySchedule::Create(10, 0, 0.25, "linear", 0).value().decay_steps(), 2);
  EXPECT_EQ(WarmupStableDecaySchedule::Create(6, 0, 0.75, "linear", 0).value().decay_steps(), 4);
  EXPECT_EQ(WarmupStableDecaySchedule::Create(6, 0, 0.25, "linear", 0).value().decay_steps(), 2);
}

TEST(LrScheduleTest, RejectsUnknownDecayType) {
  auto s = WarmupStableDecaySchedule::Create(10, 2, 0.5, "exp", 0.0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("decay_type"), std::string::npos);
}

}  // namespace
}  // namespace titan
