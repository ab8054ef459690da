#include "lib/util/torch_errors.h"

#include <ATen/ATen.h>

#include <stdexcept>

#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(CatchTorchErrorsTest, ATorchCheckIsOneLineWithoutTheBacktrace) {
  const absl::Status status = CatchTorchErrors([]() -> absl::Status {
    at::ones({2}).view({3});
    return absl::OkStatus();
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), ::testing::StartsWith("LibTorch error: shape '[3]'"));
  EXPECT_THAT(std::string(status.message()), ::testing::Not(::testing::HasSubstr("\n")));
}

// What LibTorch's scalar conversions throw (an lr past float's range).
TEST(CatchTorchErrorsTest, AStdRuntimeErrorIsCaught) {
  const absl::StatusOr<float> value = CatchTorchErrors([]() -> absl::StatusOr<float> {
    throw std::runtime_error("value cannot be converted to type float without overflow");
  });
  EXPECT_EQ(value.status(), absl::InternalError("LibTorch error: value cannot be converted to "
                                                "type float without overflow"));
}

TEST(CatchTorchErrorsTest, ResultsAndStatusesPassThrough) {
  EXPECT_EQ(*CatchTorchErrors([]() -> absl::StatusOr<int> { return 7; }), 7);
  EXPECT_EQ(CatchTorchErrors([] { return absl::NotFoundError("x"); }), absl::NotFoundError("x"));
}

}  // namespace
}  // namespace titan
