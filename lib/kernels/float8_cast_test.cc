// The fused float8 cast's math, run by its CPU loop, against ATen's composition (what
// lib/float8's CastWithScale computes elsewhere): bit for bit, layout included, for every input
// dtype, both float8 formats, each scale shape, and values that saturate, underflow or are not
// finite. cuda_kernels_test holds the CUDA kernel to the same reference on an H200.
#include "lib/kernels/float8_cast.h"

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "lib/kernels/float8_cast_math.h"

namespace titan {
namespace {

at::Tensor AtenCast(const at::Tensor& hp, const at::Tensor& scale, at::ScalarType dtype) {
  const double max = Float8MaxOf(dtype);
  return (hp.to(at::kFloat) * scale).clamp(-max, max).to(dtype);
}

// randn spread over magnitudes from subnormal to past the format's range, and ±inf, NaN, ±0.
at::Tensor Values(int64_t rows, int64_t cols, at::ScalarType dtype) {
  at::manual_seed(0);
  at::Tensor x =
      at::randn({rows, cols}) * at::exp2(at::randint(-20, 20, {rows, cols}).to(at::kFloat));
  const float inf = std::numeric_limits<float>::infinity();
  const float special[] = {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f};
  for (int64_t i = 0; i < 5; ++i) x[i % rows][(3 * i) % cols] = special[i];
  return x.to(dtype);
}

// (input dtype, float8 dtype, scale shape: 0 one value, 1 per row, 2 per column, column-major)
class Float8CastTest
    : public testing::TestWithParam<std::tuple<at::ScalarType, at::ScalarType, int, bool>> {
 protected:
  // The case's input, in its layout, and its scale.
  static std::pair<at::Tensor, at::Tensor> Inputs() {
    const auto [in_dtype, dtype, scale_kind, column_major] = GetParam();
    constexpr int64_t kRows = 37, kCols = 53;
    at::Tensor hp =
        column_major ? Values(kCols, kRows, in_dtype).t() : Values(kRows, kCols, in_dtype);
    const std::vector<int64_t> scale_shape[] = {{}, {kRows, 1}, {1, kCols}};
    return {hp, at::rand(scale_shape[scale_kind]) * 4 + 0.01};
  }
  static at::ScalarType Float8Dtype() { return std::get<1>(GetParam()); }
};

TEST_P(Float8CastTest, EqualsAtenBitForBit) {
  const auto [hp, scale] = Inputs();
  const at::ScalarType dtype = Float8Dtype();
  const at::Tensor want = AtenCast(hp, scale, dtype);
  ASSERT_TRUE(FusedFloat8CastSupports(hp, scale, dtype).ok());
  const at::Tensor got = FusedScaledCastToFloat8(hp, scale, dtype);
  EXPECT_EQ(got.scalar_type(), dtype);
  EXPECT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(got.strides(), want.strides());
  EXPECT_TRUE(at::equal(got.contiguous().view(at::kByte), want.contiguous().view(at::kByte)));
}

// Both layouts hold the same cast: the first row-major, the second column-major.
TEST_P(Float8CastTest, BothLayoutsEqualAtenBitForBit) {
  const auto [hp, scale] = Inputs();
  const at::ScalarType dtype = Float8Dtype();
  const at::Tensor want = AtenCast(hp, scale, dtype).contiguous().view(at::kByte);
  const Float8CastLayouts got = FusedScaledCastToFloat8BothLayouts(hp, scale, dtype);
  EXPECT_TRUE(got.row_major.is_contiguous());
  EXPECT_TRUE(got.column_major.t().is_contiguous());
  EXPECT_EQ(got.column_major.scalar_type(), dtype);
  EXPECT_TRUE(at::equal(got.row_major.view(at::kByte), want));
  EXPECT_TRUE(at::equal(got.column_major.contiguous().view(at::kByte), want));
}

INSTANTIATE_TEST_SUITE_P(Casts, Float8CastTest,
                         testing::Combine(testing::Values(at::kFloat, at::kBFloat16, at::kHalf),
                                          testing::Values(at::kFloat8_e4m3fn, at::kFloat8_e5m2),
                                          testing::Values(0, 1, 2), testing::Bool()));

// The scale kernel's math (Float8ScaleFromAmax) against lib/float8's Float8ScaleOf's ATen ops on
// the same maxima: bit for bit over 30 binades, below the 1e-12 floor, zero, infinity and NaN.
TEST(Float8ScaleFromAmaxTest, EqualsAtenBitForBit) {
  at::manual_seed(3);
  at::Tensor amax = at::rand({4000}) * at::exp2(at::randint(-60, 30, {4000})).to(at::kFloat);
  amax.slice(0, 0, 6).copy_(at::tensor({0.0F, 1e-13F, 1e-12F, 1.0F, INFINITY, NAN}));
  for (const at::ScalarType dtype : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
    const at::Tensor want =
        (amax.to(at::kDouble).clamp_min(1e-12).reciprocal() * Float8MaxOf(dtype)).to(at::kFloat);
    const float* a = amax.data_ptr<float>();
    const float* w = want.data_ptr<float>();
    for (int64_t i = 0; i < amax.numel(); ++i) {
      const float got = Float8ScaleFromAmax(a[i], Float8MaxOf(dtype));
      ASSERT_TRUE(got == w[i] || (std::isnan(got) && std::isnan(w[i])))
          << "amax " << a[i] << ": " << got << " vs " << w[i];
    }
  }
  // CUDA only (cuda_kernels_test runs it): on the CPU ATen's ops cost no launches.
  EXPECT_FALSE(FusedFloat8ScalesSupports(amax).ok());
}

TEST(Float8CastSupportTest, RefusesWhatTheKernelDoesNotTake) {
  const at::Tensor hp = at::randn({4, 6});
  const at::Tensor one = at::ones({});
  EXPECT_TRUE(FusedFloat8CastSupports(hp, one, at::kFloat8_e4m3fn).ok());
  auto message = [](const absl::Status& status) { return std::string(status.message()); };
  EXPECT_NE(message(FusedFloat8CastSupports(hp, one, at::kBFloat16)).find("expected Float8"),
            std::string::npos);
  EXPECT_NE(message(FusedFloat8CastSupports(hp.slice(1, 0, 6, 2), one, at::kFloat8_e4m3fn))
                .find("row- or column-major"),
            std::string::npos);
  EXPECT_NE(message(FusedFloat8CastSupports(hp, at::ones({4}), at::kFloat8_e4m3fn)).find("[4, 1]"),
            std::string::npos);
  EXPECT_NE(message(FusedFloat8CastSupports(hp, at::ones({}, at::kDouble), at::kFloat8_e4m3fn))
                .find("expected float32"),
            std::string::npos);
  EXPECT_NE(message(FusedFloat8CastSupports(hp.to(at::kInt), one, at::kFloat8_e4m3fn))
                .find("expected float32, bfloat16 or float16"),
            std::string::npos);
}

}  // namespace
}  // namespace titan
