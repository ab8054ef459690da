#include "lib/checkpoint/rng_state.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

TEST(RngStateTest, RestoredTensorStateRepeatsTheSameDraws) {
  at::manual_seed(7);
  at::rand({3});  // Move the generator away from a freshly seeded state.
  const at::Tensor state = GetCpuRngState();
  EXPECT_EQ(state.scalar_type(), at::kByte);
  const at::Tensor first = at::randn({64});
  const at::Tensor first_ints = at::randint(0, 1 << 30, {64});
  ASSERT_TRUE(SetCpuRngState(state).ok());
  EXPECT_TRUE(at::randn({64}).equal(first));
  EXPECT_TRUE(at::randint(0, 1 << 30, {64}).equal(first_ints));
}

TEST(RngStateTest, JsonRoundTripRepeatsTheSameDraws) {
  at::manual_seed(11);
  at::randn({5});  // Leaves a cached normal sample in the state on some paths.
  const nlohmann::json rng = CaptureRngState();
  const at::Tensor first = at::rand({128});
  const nlohmann::json reparsed = nlohmann::json::parse(rng.dump());
  ASSERT_TRUE(RestoreRngState(reparsed).ok());
  EXPECT_TRUE(at::rand({128}).equal(first));
}

TEST(RngStateTest, MalformedStatesAreErrors) {
  EXPECT_THAT(SetCpuRngState(at::zeros({3}, at::kFloat)).message(), HasSubstr("uint8"));
  EXPECT_THAT(SetCpuRngState(at::zeros({3}, at::kByte)).message(), HasSubstr("CPU RNG state"));
  EXPECT_THAT(RestoreRngState(nlohmann::json::array()).message(), HasSubstr("expected {\"cpu\""));
  EXPECT_THAT(RestoreRngState({{"cpu", "@@not base64@@"}}).message(), HasSubstr("base64"));
  EXPECT_FALSE(RestoreRngState({{"cpu", "AAAA"}}).ok());
}

}  // namespace
}  // namespace titan
