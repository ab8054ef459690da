// The CUDA kernels against ATen's compositions on the same CUDA tensors, forward and backward, and
// the model's dispatch to them. Without a CUDA device every test skips:
// benchmarks/gpu/h200_bench.sh runs this binary on an H200. Shapes exceed one grid of the kernels'
// grid-stride loops. Tolerances: fp32 1e-5 (the device may contract a * c - b * s into a fused
// multiply-add, and CUDA's expf is within 2 ulp, not ATen's exp bit for bit); bf16 and fp16 RoPE
// one step of their rounding (2^-7, 2^-10 relative); SwiGLU two (2^-6, 2^-9): ATen rounds
// silu(gate) to the dtype before the product, the kernel rounds once. The Adam kernel: bit for bit
// (it is written as ATen's fp32 kernel is).
#include <ATen/cuda/CUDAContext.h>
#include <torch/csrc/autograd/function.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/kernels/adam.h"
#include "lib/kernels/cross_entropy.h"
#include "lib/kernels/float8_cast.h"
#include "lib/kernels/kernel_dispatch.h"
#include "lib/kernels/kernel_test_util.h"
#include "lib/kernels/rope.h"
#include "lib/kernels/swiglu.h"
#include "lib/model/autocast.h"
#include "lib/model/op_cache.h"
#include "lib/model/rope.h"
#include "lib/model/transformer_ops.h"

namespace titan {
namespace {

using testing::HasSubstr;

Tolerance KernelTolerance(at::ScalarType dtype, bool two_roundings) {
  switch (dtype) {
    case at::kBFloat16:
      return {two_roundings ? 0.015625 : 0.0078125, 1e-5};
    case at::kHalf:
      return {two_roundings ? 0.001953125 : 0.0009765625, 1e-5};
    default:
      return {1e-5, 1e-5};
  }
}

void SkipWithoutHopper() {
  if (!at::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device: the kernels were compiled and linked, not run";
  }
  const cudaDeviceProp* device = at::cuda::getCurrentDeviceProperties();
  if (device->major != 9 || device->minor != 0) {
    GTEST_SKIP() << "the kernels are built for sm_90a; this GPU is sm_" << device->major
                 << device->minor;
  }
}

class CudaRopeTest : public testing::TestWithParam<RopeCase> {
 protected:
  void SetUp() override { SkipWithoutHopper(); }
};

TEST_P(CudaRopeTest, MatchesAtenAndTheCpuLoop) {
  const RopeCase c = GetParam();
  at::manual_seed(0);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  RopeConfig config;
  config.layout = c.layout;
  config.theta = 500000;
  const RopeTables tables = ComputeRopeTables(config, 128, 8192, cuda);
  const int64_t batch = 2, seq = 2048, heads = 5;  // 1.3M pairs
  const at::Tensor positions =
      c.per_batch_positions ? at::randint(8192, {batch, seq}, cuda.dtype(at::kLong)) : at::Tensor();
  const RopeRotation rotation = RotationForPositions(tables, positions, seq);
  const RopePairing pairing = PairingOf(c.layout);
  const at::Tensor x = at::randn({batch, seq, heads, 128}, cuda).to(c.dtype);
  const at::Tensor x_fused = x.clone().requires_grad_();
  const at::Tensor x_ref = x.clone().requires_grad_();
  const at::Tensor got = FusedRope(x_fused, rotation.cos, rotation.sin, pairing);
  const at::Tensor want = ApplyRopeUnfused(x_ref, rotation);
  const Tolerance tol = KernelTolerance(c.dtype, /*two_roundings=*/false);
  EXPECT_TRUE(AllClose(got, want, tol));
  const at::Tensor grad = at::randn(x.sizes(), cuda).to(c.dtype);
  got.backward(grad);
  want.backward(grad);
  EXPECT_TRUE(AllClose(x_fused.grad(), x_ref.grad(), tol));
  // The same math (rope_math.h) as the CPU loop the CPU tests check.
  const at::Tensor on_cpu = FusedRope(x.cpu(), rotation.cos.cpu(), rotation.sin.cpu(), pairing);
  EXPECT_TRUE(AllClose(got.cpu(), on_cpu, tol));
}

INSTANTIATE_TEST_SUITE_P(LayoutsAndDtypes, CudaRopeTest, testing::ValuesIn(AllRopeCases()));

class CudaSwiGluTest : public testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { SkipWithoutHopper(); }
};

TEST_P(CudaSwiGluTest, MatchesAten) {
  const at::ScalarType dtype = GetParam();
  at::manual_seed(0);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  // 8.6M elements: more 16-byte chunks than one grid's threads (4096 x 256) in every dtype.
  at::Tensor gate = at::randn({4096, 2100}, cuda) * 3;
  gate.view(-1).slice(0, 0, 6).copy_(at::tensor({-100.0f, -20.0f, -1.2785f, 0.0f, 20.0f, 100.0f}));
  gate = gate.to(dtype);
  const at::Tensor up = at::randn({4096, 2100}, cuda).to(dtype);
  const at::Tensor grad = at::randn({4096, 2100}, cuda).to(dtype);
  ExpectSwiGluMatchesAten(FusedSwiGlu, gate, up, grad,
                          KernelTolerance(dtype, /*two_roundings=*/true));
}

// The kernels move 16-byte chunks: a length that no chunk size divides ends in a partial chunk,
// and views at an odd element offset (not 16-byte aligned) take one element a thread, with the
// same math: bitwise the chunked path's results.
TEST_P(CudaSwiGluTest, PartialChunksAndUnalignedViewsMatchAten) {
  const at::ScalarType dtype = GetParam();
  at::manual_seed(1);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor gate = (at::randn({3003}, cuda) * 3).to(dtype);
  const at::Tensor up = at::randn({3003}, cuda).to(dtype);
  const at::Tensor grad = at::randn({3003}, cuda).to(dtype);
  ExpectSwiGluMatchesAten(FusedSwiGlu, gate, up, grad,
                          KernelTolerance(dtype, /*two_roundings=*/true));
  // Leaves one element longer, so their views from element 1 on are misaligned.
  const auto padded = [](const at::Tensor& t) {
    return at::cat({at::zeros({1}, t.options()), t}).requires_grad_();
  };
  const at::Tensor gate_leaf = padded(gate), up_leaf = padded(up), grad_pad = padded(grad);
  const at::Tensor gate_view = gate_leaf.slice(0, 1), up_view = up_leaf.slice(0, 1);
  ASSERT_NE(reinterpret_cast<uintptr_t>(gate_view.data_ptr()) % 16, 0u);
  const at::Tensor out = FusedSwiGlu(gate_view, up_view);
  out.backward(grad_pad.detach().slice(0, 1));
  const at::Tensor gate_aligned = gate.clone().requires_grad_();
  const at::Tensor up_aligned = up.clone().requires_grad_();
  const at::Tensor out_aligned = FusedSwiGlu(gate_aligned, up_aligned);
  out_aligned.backward(grad);
  EXPECT_TRUE(at::equal(out, out_aligned));
  EXPECT_TRUE(at::equal(gate_leaf.grad().slice(0, 1), gate_aligned.grad()));
  EXPECT_TRUE(at::equal(up_leaf.grad().slice(0, 1), up_aligned.grad()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaSwiGluTest,
                         testing::Values(at::kFloat, at::kBFloat16, at::kHalf));

// (input dtype, float8 dtype, per-row scales, column-major input)
class CudaFloat8CastTest
    : public testing::TestWithParam<std::tuple<at::ScalarType, at::ScalarType, bool, bool>> {
 protected:
  void SetUp() override { SkipWithoutHopper(); }
};

// Bit for bit against ATen's composition on the GPU (both round to nearest even after
// saturating), and the layout kept.
TEST_P(CudaFloat8CastTest, EqualsAtenBitForBit) {
  const auto [in_dtype, dtype, per_row, column_major] = GetParam();
  at::manual_seed(0);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  at::Tensor hp =
      at::randn({2048, 1000}, cuda) * at::exp2(at::randint(-20, 20, {2048, 1000}, cuda));
  hp.view(-1).slice(0, 0, 3).copy_(at::tensor({INFINITY, -INFINITY, NAN}));
  hp = (column_major ? hp.t().contiguous().t() : hp).to(in_dtype);
  const at::Tensor scale =
      per_row ? at::rand({2048, 1}, cuda) * 4 + 0.01 : at::full({}, 0.37f, cuda);
  const double max = Float8MaxOf(dtype);
  const at::Tensor want = (hp.to(at::kFloat) * scale).clamp(-max, max).to(dtype);
  const at::Tensor got = FusedScaledCastToFloat8(hp, scale, dtype);
  EXPECT_EQ(got.strides(), want.strides());
  EXPECT_TRUE(at::equal(got.contiguous().view(at::kByte), want.contiguous().view(at::kByte)));
}

INSTANTIATE_TEST_SUITE_P(Casts, CudaFloat8CastTest,
                         testing::Combine(testing::Values(at::kFloat, at::kBFloat16, at::kHalf),
                                          testing::Values(at::kFloat8_e4m3fn, at::kFloat8_e5m2),
                                          testing::Bool(), testing::Bool()));

// The cast's row loops at other shapes, bf16 to e4m3fn with per-row scales: narrow rows (8 a
// block, more blocks than the grid's cap), few long ones (split over the grid's second dim), and
// rows longer than a block's threads that wrap the grid too; 16-byte chunks where rows are whole
// chunks, one element a thread in rows of 1001.
class CudaFloat8CastShapesTest : public testing::Test {
 protected:
  void SetUp() override { SkipWithoutHopper(); }
};

TEST_F(CudaFloat8CastShapesTest, EqualsAtenBitForBit) {
  at::manual_seed(1);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{40000, 24}, {64, 4096}, {20000, 1000}, {3000, 1001}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const at::Tensor hp = (at::randn({rows, cols}, cuda) * 50).to(at::kBFloat16);
    const at::Tensor scale = at::rand({rows, 1}, cuda) * 4 + 0.01;
    const double max = Float8MaxOf(at::kFloat8_e4m3fn);
    const at::Tensor want = (hp.to(at::kFloat) * scale).clamp(-max, max).to(at::kFloat8_e4m3fn);
    const at::Tensor got = FusedScaledCastToFloat8(hp, scale, at::kFloat8_e4m3fn);
    EXPECT_TRUE(at::equal(got.view(at::kByte), want.view(at::kByte)));
  }
}

// Both layouts from one read, bit for bit against ATen's cast: tiles cut by the edges, every
// scale shape, and more rows than the grid's second dim covers (its loop over tile rows). Dims
// that are multiples of 8 take the 8-element-vector kernel (bf16 activations and gradients in
// e5m2, fp32 weights and fp16 in e4m3; 200 x 328 cuts its 64 x 64 tiles), the others the 32 x 32
// one.
TEST_F(CudaFloat8CastShapesTest, BothLayoutsEqualAtenBitForBit) {
  at::manual_seed(2);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{37, 1000},
                                   {8192, 4096},
                                   {200, 328},
                                   {4200000, 8},
                                   {2100000, 3}}) {
    for (const at::ScalarType dtype : {at::kBFloat16, at::kFloat, at::kHalf}) {
      const at::ScalarType format = dtype == at::kBFloat16 ? at::kFloat8_e5m2 : at::kFloat8_e4m3fn;
      for (const int scale_kind : {0, 1, 2}) {
        SCOPED_TRACE(testing::Message()
                     << rows << " x " << cols << " " << dtype << ", scale " << scale_kind);
        // Column-major too where it fits: the host swaps the layouts and transposes the scale.
        const bool column_major = rows < 100000 && scale_kind != 0;
        const at::Tensor values = (at::randn({rows, cols}, cuda) * 50).to(dtype);
        const at::Tensor hp = column_major ? values.t().contiguous().t() : values;
        const std::vector<int64_t> scale_shape[] = {{}, {rows, 1}, {1, cols}};
        const at::Tensor scale = at::rand(scale_shape[scale_kind], cuda) * 4 + 0.01;
        const double max = Float8MaxOf(format);
        const at::Tensor want =
            (hp.to(at::kFloat) * scale).clamp(-max, max).to(format).view(at::kByte);
        const Float8CastLayouts got = FusedScaledCastToFloat8BothLayouts(hp, scale, format);
        EXPECT_TRUE(got.column_major.t().is_contiguous());
        EXPECT_TRUE(at::equal(got.row_major.view(at::kByte), want));
        EXPECT_TRUE(at::equal(got.column_major.contiguous().view(at::kByte), want));
      }
    }
  }
}

// Scales and their reciprocals in one launch, bit for bit against lib/float8's ATen ops (the
// scale) and at::reciprocal (what Float8Matmul took), for tensorwise and per-row maxima in fp32
// and bf16 (AmaxOf returns the input's dtype), with zero, infinity and NaN among them.
TEST_F(CudaFloat8CastShapesTest, ScalesFromAmaxEqualAten) {
  at::manual_seed(4);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  at::Tensor rows = at::rand({5000, 1}, cuda) * at::exp2(at::randint(-60, 30, {5000, 1}, cuda));
  rows.view(-1).slice(0, 0, 4).copy_(at::tensor({0.0F, 1e-13F, INFINITY, NAN}));
  for (const at::Tensor& amax : {at::full({}, 3.5F, cuda), rows, rows.to(at::kBFloat16)}) {
    for (const at::ScalarType dtype : {at::kFloat8_e4m3fn, at::kFloat8_e5m2}) {
      SCOPED_TRACE(testing::Message() << amax.sizes() << " " << amax.scalar_type());
      const at::Tensor want =
          (amax.to(at::kDouble).clamp_min(1e-12).reciprocal() * Float8MaxOf(dtype)).to(at::kFloat);
      const Float8Scales got = FusedFloat8ScalesFromAmax(amax, dtype);
      EXPECT_EQ(got.scale.sizes(), amax.sizes());
      EXPECT_TRUE(at::equal(got.scale.view(at::kInt), want.view(at::kInt)));
      EXPECT_TRUE(at::equal(got.inverse.view(at::kInt), want.reciprocal().view(at::kInt)));
    }
  }
}

class CudaDispatchTest : public testing::Test {
 protected:
  void SetUp() override { SkipWithoutHopper(); }
};

TEST_F(CudaDispatchTest, ModelOpsTakeTheFusedKernelsOnCudaAndAtenOnCpu) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const RopeTables tables = ComputeRopeTables(RopeConfig{}, 64, 16, cuda);
  const RopeRotation rotation = RotationForPositions(tables, at::Tensor(), 16);
  const at::Tensor x = at::randn({1, 16, 2, 64}, cuda.dtype(at::kBFloat16)).requires_grad_();
  EXPECT_THAT(ApplyRope(x, rotation).grad_fn()->name(), HasSubstr("RopeFunction"));
  const at::Tensor gate = at::randn({4, 8}, cuda.dtype(at::kBFloat16)).requires_grad_();
  EXPECT_THAT(SwiGlu(gate, gate.detach()).grad_fn()->name(), HasSubstr("SwiGluFunction"));
  const at::Tensor cpu_gate = gate.detach().cpu().requires_grad_();
  EXPECT_THAT(SwiGlu(cpu_gate, cpu_gate.detach()).grad_fn()->name(),
              testing::Not(HasSubstr("SwiGluFunction")));
}

// RmsNorm on CUDA takes ATen's fused kernel, also for bf16 heads with an fp32 weight (qk-norm
// under autocast; the weight is cast), and returns x's dtype; forward and backward against the
// reference formula in fp64. Tolerances: fp32 1e-5 (another summation order); bf16 2^-6, the
// weight's and the output's roundings (2^-8 each) with room, gradients relative to their largest.
class CudaRmsNormTest : public testing::TestWithParam<at::ScalarType> {
 protected:
  void SetUp() override { SkipWithoutHopper(); }
};

TEST_P(CudaRmsNormTest, TakesTheFusedKernelAndMatchesFp64) {
  at::manual_seed(0);
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::ScalarType dtype = GetParam();
  const double eps = 1e-6;
  const at::Tensor x = at::randn({4, 256, 8, 128}, cuda).to(dtype);
  const at::Tensor w = 1 + 0.1 * at::randn({128}, cuda);  // fp32, as an autocast run's weights
  const at::Tensor x_got = x.clone().requires_grad_();
  const at::Tensor w_got = w.clone().requires_grad_();
  const at::Tensor got = RmsNorm(x_got, w_got, eps);
  EXPECT_EQ(got.scalar_type(), dtype);
  EXPECT_THAT(got.grad_fn()->name(), HasSubstr("FusedRmsNorm"));
  const at::Tensor x64 = x.to(at::kDouble).requires_grad_();
  const at::Tensor w64 = w.to(at::kDouble).requires_grad_();
  const at::Tensor want = x64 * at::rsqrt(x64.pow(2).mean(-1, /*keepdim=*/true) + eps) * w64;
  const at::Tensor grad = at::randn(got.sizes(), cuda).to(dtype);
  got.backward(grad);
  want.backward(grad.to(at::kDouble));
  const double rtol = dtype == at::kFloat ? 1e-5 : 0.015625;
  EXPECT_TRUE(AllClose(got.to(at::kDouble), want.detach(), {rtol, 1e-5}));
  for (const auto& [got_grad, want_grad] :
       {std::pair(x_got.grad(), x64.grad()), std::pair(w_got.grad(), w64.grad())}) {
    const double scale = want_grad.abs().max().item<double>();
    EXPECT_TRUE(AllClose(got_grad.to(at::kDouble), want_grad, {rtol, rtol * scale}));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaRmsNormTest, testing::Values(at::kFloat, at::kBFloat16));

// The decoder's Linear under bf16 autocast: autocast's forward, and fp32 gradients straight from
// cuBLAS's fp32 accumulator (within 1e-5 of the exact products of the bf16 operands; autocast's
// own are rounded to bf16, about 2^-9 off). 5e-5: tensor cores round their partial sums per
// k-block.
TEST_F(CudaDispatchTest, LinearUnderAutocastTakesFp32GradientsFromTheGemm) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor x = at::randn({2, 256, 512}, cuda).requires_grad_();
  const at::Tensor weight = at::randn({384, 512}, cuda).requires_grad_();
  at::Tensor out;
  {
    AutocastScope autocast(at::kCUDA, at::kBFloat16);
    out = Linear(x, weight);
  }
  EXPECT_THAT(out.grad_fn()->name(), HasSubstr("MixedPrecisionLinearFunction"));
  EXPECT_TRUE(at::equal(out, at::linear(x.to(at::kBFloat16), weight.to(at::kBFloat16))));
  const at::Tensor grad = at::randn(out.sizes(), cuda).to(at::kBFloat16);
  out.backward(grad);
  ASSERT_EQ(x.grad().scalar_type(), at::kFloat);
  ASSERT_EQ(weight.grad().scalar_type(), at::kFloat);
  const at::Tensor g = grad.to(at::kDouble).reshape({-1, 384});
  const at::Tensor x_low = x.detach().to(at::kBFloat16).to(at::kDouble).reshape({-1, 512});
  const at::Tensor w_low = weight.detach().to(at::kBFloat16).to(at::kDouble);
  EXPECT_LT(MaxRelativeError(weight.grad(), g.t().mm(x_low)), 5e-5);
  EXPECT_LT(MaxRelativeError(x.grad(), g.mm(w_low).view(x.sizes())), 5e-5);
  const at::Tensor weight_ref = weight.detach().clone().requires_grad_();
  at::linear(x.detach().to(at::kBFloat16), weight_ref.to(at::kBFloat16)).backward(grad);
  EXPECT_GT(MaxRelativeError(weight_ref.grad(), g.t().mm(x_low)), 1e-4);
}

// Turns the kernels off for one test, on again even when it fails.
class CudaKernelsOffTest : public CudaDispatchTest {
 protected:
  void SetUp() override {
    CudaDispatchTest::SetUp();
    SetFusedKernels(false);
  }
  void TearDown() override { SetFusedKernels(true); }
};

TEST_F(CudaKernelsOffTest, ModelOpsTakeAten) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor gate = at::randn({4, 8}, cuda.dtype(at::kBFloat16)).requires_grad_();
  EXPECT_THAT(SwiGlu(gate, gate.detach()).grad_fn()->name(),
              testing::Not(HasSubstr("SwiGluFunction")));
  EXPECT_THAT(FusedSwiGluSupports(gate, gate.detach()).message(),
              HasSubstr("fused_kernels = false"));
  const at::Tensor weight = at::randn({8, 8}, cuda).requires_grad_();
  AutocastScope autocast(at::kCUDA, at::kBFloat16);
  EXPECT_THAT(Linear(at::randn({4, 8}, cuda), weight).grad_fn()->name(),
              testing::Not(HasSubstr("MixedPrecisionLinearFunction")));
}

// One kernel off at a time ([compile] disabled_kernels): its check refuses by name, and the model
// ops of the others keep their kernels.
class CudaOneKernelOffTest : public CudaDispatchTest {
 protected:
  void TearDown() override { SetFusedKernels(true); }
};

TEST_F(CudaOneKernelOffTest, EachCheckRefusesItsKernelAlone) {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor x = at::randn({1, 4, 2, 8}, cuda.dtype(at::kBFloat16));
  const at::Tensor rotation = at::randn({1, 4, 1, 4}, cuda);
  const at::Tensor gate = at::randn({4, 8}, cuda.dtype(at::kBFloat16));
  const at::Tensor amax = at::ones({}, cuda);
  const at::Tensor param = at::randn({8}, cuda);
  const at::Tensor labels = at::zeros({4}, cuda.dtype(at::kLong));
  const std::vector<std::pair<FusedKernel, std::function<absl::Status()>>> checks = {
      {FusedKernel::kRope, [&] { return FusedRopeSupports(x, rotation, rotation); }},
      {FusedKernel::kSwiGlu, [&] { return FusedSwiGluSupports(gate, gate); }},
      {FusedKernel::kFloat8Cast, [&] { return FusedFloat8ScalesSupports(amax); }},
      {FusedKernel::kFloat8Cast,
       [&] { return FusedFloat8CastSupports(gate, amax, at::kFloat8_e4m3fn); }},
      {FusedKernel::kAdam,
       [&] { return FusedAdamSupports({param}, {param}, {param}, {param}, {amax}, at::Tensor()); }},
      {FusedKernel::kCrossEntropy, [&] { return FusedCrossEntropySupports(gate, labels); }},
  };
  for (const auto& [kernel, check] : checks) {
    const std::string name(FusedKernelName(kernel));
    SetFusedKernels(true);
    EXPECT_TRUE(check().ok()) << name << ": " << check();
    SetFusedKernels(true, {kernel});
    EXPECT_THAT(check().message(), HasSubstr("\"" + name + "\" is off")) << name;
    // Every other kernel off leaves this one on.
    std::vector<FusedKernel> others;
    for (int k = 0; k < static_cast<int>(FusedKernel::kCount); ++k) {
      if (static_cast<FusedKernel>(k) != kernel) others.push_back(static_cast<FusedKernel>(k));
    }
    SetFusedKernels(true, others);
    EXPECT_TRUE(check().ok()) << name << " with the others off: " << check();
  }
}

TEST_F(CudaOneKernelOffTest, ModelOpsOfTheOthersKeepTheirKernels) {
  SetFusedKernels(true, {FusedKernel::kSwiGlu});
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const at::Tensor gate = at::randn({4, 8}, cuda.dtype(at::kBFloat16)).requires_grad_();
  EXPECT_THAT(SwiGlu(gate, gate.detach()).grad_fn()->name(),
              testing::Not(HasSubstr("SwiGluFunction")));
  const at::Tensor weight = at::randn({8, 8}, cuda).requires_grad_();
  AutocastScope autocast(at::kCUDA, at::kBFloat16);
  EXPECT_THAT(Linear(at::randn({4, 8}, cuda), weight).grad_fn()->name(),
              HasSubstr("MixedPrecisionLinearFunction"));
}

struct CudaAdamCase {
  bool decoupled;
  double weight_decay;
  bool scaled;  // with a clipping scale
};

class CudaFusedAdamTest : public testing::TestWithParam<CudaAdamCase> {
 protected:
  void SetUp() override { SkipWithoutHopper(); }
};

// One optimizer's tensors: 61 parameters (two launches) of sizes around the kernel's chunk, one
// empty, one an unaligned view (the element-wise path).
struct AdamTensors {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
};

AdamTensors MakeAdamTensors() {
  const auto cuda = at::TensorOptions().device(at::kCUDA);
  const std::vector<int64_t> sizes = {1, 3, 4095, 4096, 4097, 65543, 300000, 0};
  AdamTensors t;
  at::manual_seed(0);
  for (int i = 0; i < 61; ++i) {
    const int64_t n = sizes[i % sizes.size()];
    t.params.push_back(i == 5 ? at::randn({n + 1}, cuda).narrow(0, 1, n) : at::randn({n}, cuda));
    t.exp_avgs.push_back(at::zeros({n}, cuda));
    t.exp_avg_sqs.push_back(at::zeros({n}, cuda));
    t.steps.push_back(at::zeros({}, cuda));
  }
  return t;
}

// titan's kernel against ATen's _foreach_mul_ (the clipping) and _fused_adam(w)_ over three steps:
// parameters and moments bit for bit, the gradients left as they were, versions advanced; every
// other parameter's bf16 copy written with .to(bf16)'s bits (one copy unaligned: the element path).
TEST_P(CudaFusedAdamTest, EqualsAtenBitForBit) {
  const CudaAdamCase c = GetParam();
  AdamTensors mine = MakeAdamTensors();
  AdamTensors aten = MakeAdamTensors();
  std::vector<at::Tensor> copies;
  for (size_t i = 0; i < mine.params.size(); ++i) {
    const at::Tensor& p = mine.params[i];
    const at::TensorOptions bf16 = p.options().dtype(at::kBFloat16);
    copies.push_back(i % 2 == 0 ? at::Tensor()
                     : i == 3   ? at::empty({p.numel() + 1}, bf16).narrow(0, 1, p.numel())
                                : at::empty(p.sizes(), bf16));
  }
  const AdamSettings settings{3e-3, 0.9, 0.95, 1e-8, c.weight_decay, c.decoupled};
  for (int step = 0; step < 3; ++step) {
    std::vector<at::Tensor> grads;
    for (const at::Tensor& p : mine.params) grads.push_back(at::randn(p.sizes(), p.options()));
    std::vector<at::Tensor> grads_copy;
    std::vector<at::Tensor> grads_before;
    for (const at::Tensor& g : grads) {
      grads_copy.push_back(g.clone());
      grads_before.push_back(g.clone());
    }
    const at::Tensor scale =
        c.scaled ? at::full({}, 0.25f + 0.5f * step, grads[0].options()) : at::Tensor();
    at::_foreach_add_(mine.steps, 1);
    const int64_t version = mine.params[1]._version();
    FusedAdamStep(mine.params, grads, mine.exp_avgs, mine.exp_avg_sqs, mine.steps, settings, scale,
                  copies);
    EXPECT_GT(mine.params[1]._version(), version);
    if (c.scaled) at::_foreach_mul_(grads_copy, scale);
    at::_foreach_add_(aten.steps, 1);
    if (c.decoupled) {
      at::_fused_adamw_(aten.params, grads_copy, aten.exp_avgs, aten.exp_avg_sqs, {}, aten.steps,
                        settings.lr, settings.beta1, settings.beta2, settings.weight_decay,
                        settings.eps, false, false, std::nullopt, std::nullopt);
    } else {
      at::_fused_adam_(aten.params, grads_copy, aten.exp_avgs, aten.exp_avg_sqs, {}, aten.steps,
                       settings.lr, settings.beta1, settings.beta2, settings.weight_decay,
                       settings.eps, false, false, std::nullopt, std::nullopt);
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      ASSERT_TRUE(at::equal(mine.params[i], aten.params[i])) << "step " << step << " param " << i;
      ASSERT_TRUE(at::equal(mine.exp_avgs[i], aten.exp_avgs[i])) << "step " << step << " " << i;
      ASSERT_TRUE(at::equal(mine.exp_avg_sqs[i], aten.exp_avg_sqs[i])) << "step " << step;
      ASSERT_TRUE(at::equal(grads[i], grads_before[i])) << "gradient " << i << " was written";
      if (copies[i].defined()) {
        ASSERT_TRUE(at::equal(copies[i], mine.params[i].to(at::kBFloat16))) << "copy " << i;
      }
    }
  }
}

TEST_P(CudaFusedAdamTest, RefusesACopyOfAnotherDtypeOrSize) {
  AdamTensors t = MakeAdamTensors();
  at::_foreach_add_(t.steps, 1);
  const AdamSettings settings{3e-3, 0.9, 0.95, 1e-8, 0.1, true};
  for (const at::Tensor& wrong :
       {at::empty(t.params[1].sizes(), t.params[1].options()),
        at::empty({t.params[1].numel() + 1}, t.params[1].options().dtype(at::kBFloat16))}) {
    std::vector<at::Tensor> copies(t.params.size());
    copies[1] = wrong;
    EXPECT_THROW(FusedAdamStep(t.params, t.params, t.exp_avgs, t.exp_avg_sqs, t.steps, settings,
                               at::Tensor(), copies),
                 c10::Error);
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaFusedAdamTest,
                         testing::Values(CudaAdamCase{true, 0.1, true},
                                         CudaAdamCase{true, 0.1, false},
                                         CudaAdamCase{false, 0.01, true},
                                         CudaAdamCase{true, 0.0, true}));

class CudaCrossEntropyTest
    : public testing::TestWithParam<std::tuple<at::ScalarType, int64_t, int64_t>> {
 protected:
  void SetUp() override { SkipWithoutHopper(); }
};

// The kernels against ATen's cross_entropy_loss on fp32 logits (titan's loss before them), with
// ignored, confident and masked rows; Llama 3's vocabulary (16-byte accesses) and an odd one (one
// element a thread).
TEST_P(CudaCrossEntropyTest, MatchesAten) {
  const auto [dtype, rows, vocab] = GetParam();
  ExpectCrossEntropyMatchesAten(MakeCrossEntropyCase(rows, vocab, dtype, at::kCUDA), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaCrossEntropyTest,
    testing::Values(std::make_tuple(at::kBFloat16, int64_t{2048}, int64_t{128256}),
                    std::make_tuple(at::kFloat, int64_t{512}, int64_t{128256}),
                    std::make_tuple(at::kBFloat16, int64_t{300}, int64_t{32001})));

}  // namespace
}  // namespace titan
