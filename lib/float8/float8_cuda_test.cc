// Float8Linear through CUDA's at::_scaled_mm against its own emulation (the same float8 operands
// dequantised and multiplied in fp32) on the same CUDA tensors, for every recipe: the layouts,
// dtypes and scale shapes the kernel demands, which the CPU kernel does not check. Without a
// CUDA device of sm_89 or later every test skips; benchmarks/gpu/h200_bench.sh runs this binary.
#include <ATen/cuda/CUDAContext.h>

#include "gtest/gtest.h"
#include "lib/float8/float8_linear.h"

namespace titan {
namespace {

double RelativeError(const at::Tensor& value, const at::Tensor& reference) {
  return ((value.to(at::kFloat) - reference.to(at::kFloat)).norm() /
          reference.to(at::kFloat).norm())
      .item<double>();
}

struct Result {
  at::Tensor out, grad_x, grad_weight;
};

Result RunLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& grad,
                 const Float8LinearOptions& options) {
  const at::Tensor x_leaf = x.clone().set_requires_grad(true);
  const at::Tensor weight_leaf = weight.clone().set_requires_grad(true);
  const at::Tensor out = Float8Linear(x_leaf, weight_leaf, options);
  out.backward(grad);
  return {out.detach(), x_leaf.grad(), weight_leaf.grad()};
}

class Float8CudaTest : public testing::TestWithParam<Float8Recipe> {
 protected:
  void SetUp() override {
    if (!at::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA device: the float8 CUDA path was compiled and linked, not run";
    }
    const cudaDeviceProp* device = at::cuda::getCurrentDeviceProperties();
    if (device->major * 10 + device->minor < 89) {
      GTEST_SKIP() << "float8 matmuls need sm_89 or later; this GPU is sm_" << device->major
                   << device->minor;
    }
  }
};

TEST_P(Float8CudaTest, ScaledMatmulEqualsTheEmulation) {
  at::manual_seed(0);
  const at::TensorOptions cuda = at::TensorOptions().device(at::kCUDA);
  // bf16 activations and an fp32 weight, as under autocast; 2 x 4100 tokens, not a multiple of
  // 16: grad_weight contracts over them.
  const at::Tensor x = at::randn({2, 4100, 256}, cuda.dtype(at::kBFloat16));
  const at::Tensor weight = at::randn({512, 256}, cuda) * 0.05;
  const at::Tensor grad = at::randn({2, 4100, 512}, cuda.dtype(at::kBFloat16)) * 1e-2;
  const Result kernel = RunLinear(x, weight, grad, {GetParam(), /*emulate=*/false});
  const Result emulated = RunLinear(x, weight, grad, {GetParam(), /*emulate=*/true});
  ASSERT_EQ(kernel.out.scalar_type(), at::kBFloat16);
  ASSERT_EQ(kernel.grad_weight.scalar_type(), at::kFloat);
  // Same float8 operands; the kernel accumulates otherwise (fast accumulation for the output)
  // and rounds its bf16 results once. A wrong layout, dtype or scale is off by O(1).
  EXPECT_LT(RelativeError(kernel.out, emulated.out), 1e-2);
  EXPECT_LT(RelativeError(kernel.grad_x, emulated.grad_x), 1e-2);
  EXPECT_LT(RelativeError(kernel.grad_weight, emulated.grad_weight), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Recipes, Float8CudaTest,
                         testing::Values(Float8Recipe::kTensorwise, Float8Recipe::kRowwise,
                                         Float8Recipe::kRowwiseWithGwHp),
                         [](const testing::TestParamInfo<Float8Recipe>& info) {
                           return Float8RecipeName(info.param);
                         });

}  // namespace
}  // namespace titan
