#include "lib/kernels/kernel_dispatch.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/config/job_config.pb.h"

namespace titan {
namespace {

constexpr FusedKernel kAll[] = {FusedKernel::kRope,
                                FusedKernel::kSwiGlu,
                                FusedKernel::kFloat8Cast,
                                FusedKernel::kAdam,
                                FusedKernel::kBf16WeightCopies,
                                FusedKernel::kCrossEntropy,
                                FusedKernel::kMixedPrecisionLinear};

// Leaves every kernel on for the next test, also when one fails.
class FusedKernelSwitchTest : public testing::Test {
 protected:
  void TearDown() override { SetFusedKernels(true); }
};

TEST_F(FusedKernelSwitchTest, NamesRoundTripAndAreTheConfigsChoices) {
  std::vector<std::string> names;
  for (FusedKernel kernel : kAll) {
    const std::string name(FusedKernelName(kernel));
    absl::StatusOr<FusedKernel> back = FusedKernelNamed(name);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, kernel) << name;
    names.push_back(name);
  }
  // [compile] disabled_kernels accepts exactly these names.
  const google::protobuf::FieldDescriptor* field =
      JobConfig::Compile::descriptor()->FindFieldByName("disabled_kernels");
  ASSERT_NE(field, nullptr);
  const auto& choices = field->options().GetRepeatedExtension(titan::choices);
  EXPECT_EQ(std::vector<std::string>(choices.begin(), choices.end()), names);
  EXPECT_EQ(FusedKernelNamed("flash").status().message(),
            "unknown kernel \"flash\"; expected one of rope, swiglu, float8_cast, adam, "
            "bf16_weight_copies, cross_entropy, mixed_precision_linear");
}

TEST_F(FusedKernelSwitchTest, DisablingOneLeavesTheOthersOn) {
  SetFusedKernels(true, {FusedKernel::kAdam, FusedKernel::kCrossEntropy});
  for (FusedKernel kernel : kAll) {
    const bool off = kernel == FusedKernel::kAdam || kernel == FusedKernel::kCrossEntropy;
    EXPECT_EQ(FusedKernelEnabled(kernel), !off) << FusedKernelName(kernel);
  }
  // A later call replaces the list.
  SetFusedKernels(true, {FusedKernel::kRope});
  EXPECT_TRUE(FusedKernelEnabled(FusedKernel::kAdam));
  EXPECT_FALSE(FusedKernelEnabled(FusedKernel::kRope));
}

TEST_F(FusedKernelSwitchTest, FusedKernelsOffTurnsEveryKernelOff) {
  SetFusedKernels(false);
  for (FusedKernel kernel : kAll) EXPECT_FALSE(FusedKernelEnabled(kernel));
  SetFusedKernels(true);
  for (FusedKernel kernel : kAll) EXPECT_TRUE(FusedKernelEnabled(kernel));
}

TEST_F(FusedKernelSwitchTest, CpuTensorsKeepTheReferenceLoopsWhateverTheSwitches) {
  // The CPU loops are the kernels' references (and their tests' subjects): never switched off.
  SetFusedKernels(false, {FusedKernel::kRope});
  EXPECT_TRUE(CheckKernelDevice(at::zeros({2}), "x", FusedKernel::kRope).ok());
}

}  // namespace
}  // namespace titan
