// titan's CUDA kernels executed on this CPU through cuda_host_emulation.h: their launch code and
// kernels as written, each block's threads as threads with real barriers and warp exchanges.
// The Adam step, the float8 casts and scales and cross-entropy have not run on a GPU yet; RoPE and
// SwiGLU have (this keeps their edits checked here). Against the references their CUDA tests use,
// or their per-element math (the *_math.h functions both sides run) where only indexing differs.
// This file and the emulated kernels are compiled with -Dtitan=titan_emulated, so that they never
// meet the real CUDA library's symbols.
#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "lib/kernels/float8_cast_math.h"
#include "lib/kernels/launch.h"
#include "lib/kernels/rope_math.h"
#include "lib/kernels/swiglu_math.h"

namespace titan {
namespace {

// --- Adam --------------------------------------------------------------------------------------

struct AdamRun {
  bool scaled;  // a clipping scale of 0.75, else none (1)
  int blocks;   // at most this many a launch: fewer than the chunks, a grid-stride loop
};

class EmulatedAdamTest : public testing::TestWithParam<AdamRun> {};

// 61 tensors (two launches) of sizes around a chunk, one empty, one parameter and one bf16 copy
// at unaligned addresses (the element path), copies on every other tensor; two steps against
// AdamElement over every element.
TEST_P(EmulatedAdamTest, EveryElementStepsAsAdamElementAndCopiesAreItsBf16) {
  const AdamRun run = GetParam();
  const std::vector<int64_t> sizes = {1, 3, 4095, 4096, 4097, 65543, 30000, 0};
  const AdamConstants constants{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, /*decoupled=*/true};
  at::manual_seed(0);
  std::vector<at::Tensor> params, exp_avgs, exp_avg_sqs, steps, copies;
  for (int i = 0; i < 61; ++i) {
    const int64_t n = sizes[i % sizes.size()];
    params.push_back(i == 5 ? at::randn({n + 1}).narrow(0, 1, n) : at::randn({n}));
    exp_avgs.push_back(at::zeros({n}));
    exp_avg_sqs.push_back(at::zeros({n}));
    steps.push_back(at::zeros({}));
    const at::Tensor copy = at::zeros({n + 1}, at::kBFloat16);
    copies.push_back(i % 2 == 1 ? (i == 13 ? copy.narrow(0, 1, n) : copy.narrow(0, 0, n))
                                : at::Tensor());
  }
  std::vector<at::Tensor> want_params, want_exp_avgs, want_exp_avg_sqs;
  for (int i = 0; i < 61; ++i) {
    want_params.push_back(params[i].clone());
    want_exp_avgs.push_back(exp_avgs[i].clone());
    want_exp_avg_sqs.push_back(exp_avg_sqs[i].clone());
  }
  const float scale_value = run.scaled ? 0.75f : 1.0f;
  const at::Tensor scale = at::full({}, scale_value);
  for (int step = 1; step <= 2; ++step) {
    std::vector<at::Tensor> grads;
    std::vector<AdamTensorPointers> pointers;
    for (int i = 0; i < 61; ++i) {
      grads.push_back(at::randn(params[i].sizes()));
      steps[i].add_(1);
      pointers.push_back({params[i].data_ptr<float>(), grads[i].data_ptr<float>(),
                          exp_avgs[i].data_ptr<float>(), exp_avg_sqs[i].data_ptr<float>(),
                          steps[i].data_ptr<float>(), params[i].numel(),
                          copies[i].defined() ? copies[i].data_ptr() : nullptr});
    }
    const std::vector<at::Tensor> grads_before = [&] {
      std::vector<at::Tensor> out;
      for (const at::Tensor& g : grads) out.push_back(g.clone());
      return out;
    }();
    ASSERT_EQ(LaunchFusedAdam(pointers.data(), 61, constants,
                              run.scaled ? scale.data_ptr<float>() : nullptr, run.blocks, nullptr),
              cudaSuccess);
    const AdamBiasCorrections bias = AdamBiasCorrectionsFor(constants, static_cast<float>(step));
    for (int i = 0; i < 61; ++i) {
      float* p = want_params[i].data_ptr<float>();
      float* m = want_exp_avgs[i].data_ptr<float>();
      float* v = want_exp_avg_sqs[i].data_ptr<float>();
      const float* g = grads_before[i].data_ptr<float>();
      for (int64_t e = 0; e < want_params[i].numel(); ++e) {
        AdamElement(constants, bias, scale_value, g[e], p[e], m[e], v[e]);
      }
      EXPECT_TRUE(at::equal(grads[i], grads_before[i])) << "tensor " << i << " grad written";
    }
  }
  for (int i = 0; i < 61; ++i) {
    EXPECT_TRUE(at::equal(params[i], want_params[i])) << "tensor " << i;
    EXPECT_TRUE(at::equal(exp_avgs[i], want_exp_avgs[i])) << "tensor " << i;
    EXPECT_TRUE(at::equal(exp_avg_sqs[i], want_exp_avg_sqs[i])) << "tensor " << i;
    if (copies[i].defined()) {
      EXPECT_TRUE(at::equal(copies[i], params[i].to(at::kBFloat16))) << "copy " << i;
    }
  }
  // The steps moved the parameters.
  EXPECT_GT((params[6] - at::zeros_like(params[6])).abs().sum().item<float>(), 0);
}

INSTANTIATE_TEST_SUITE_P(Runs, EmulatedAdamTest,
                         testing::Values(AdamRun{true, 7}, AdamRun{false, 64}));

// --- float8 casts ------------------------------------------------------------------------------

KernelDtype KernelDtypeFor(at::ScalarType dtype) {
  return dtype == at::kFloat      ? KernelDtype::kFloat32
         : dtype == at::kBFloat16 ? KernelDtype::kBFloat16
                                  : KernelDtype::kFloat16;
}

// What the casts compute, in ATen ops (float8_cast_test holds the CPU loop to the same).
at::Tensor AtenCast(const at::Tensor& hp, const at::Tensor& scale, at::ScalarType dtype,
                    double max) {
  return (hp.to(at::kFloat) * scale).clamp(-max, max).to(dtype);
}

struct CastCase {
  int64_t rows, cols;
  at::ScalarType dtype;
  int scale_kind;  // 0 one scale, 1 per row, 2 per column
  bool e4m3;
  bool misaligned = false;  // the input one element past an aligned address: no vector loads
};

class EmulatedFloat8CastTest : public testing::TestWithParam<CastCase> {
 protected:
  void SetUp() override {
    const CastCase c = GetParam();
    at::manual_seed(0);
    const at::Tensor values = (at::randn({c.rows, c.cols}) *
                               at::exp2(at::randint(-12, 12, {c.rows, c.cols}).to(at::kFloat)))
                                  .to(c.dtype);
    hp = c.misaligned ? at::empty({c.rows * c.cols + 1}, values.options())
                            .narrow(0, 1, c.rows * c.cols)
                            .view({c.rows, c.cols})
                            .copy_(values)
                      : values;
    const std::vector<std::vector<int64_t>> shapes = {{}, {c.rows, 1}, {1, c.cols}};
    scale = at::rand(shapes[c.scale_kind]) * 4 + 0.01;
    row_stride = c.scale_kind == 1 ? 1 : 0;
    col_stride = c.scale_kind == 2 ? 1 : 0;
    float8 = c.e4m3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
    max = c.e4m3 ? 448.0 : 57344.0;
    want = AtenCast(hp, scale, float8, max).view(at::kByte);
  }
  Float8KernelDtype KernelFloat8() const {
    return GetParam().e4m3 ? Float8KernelDtype::kE4m3fn : Float8KernelDtype::kE5m2;
  }

  at::Tensor hp, scale, want;
  int64_t row_stride = 0, col_stride = 0;
  at::ScalarType float8 = at::kFloat8_e4m3fn;
  double max = 448;
};

TEST_P(EmulatedFloat8CastTest, BothLayoutsEqualAtenByteForByte) {
  const CastCase c = GetParam();
  at::Tensor out = at::full({c.rows, c.cols}, 0x7f, at::kByte);  // NaN bytes where unwritten
  at::Tensor out_t = at::full({c.cols, c.rows}, 0x7f, at::kByte);
  ASSERT_EQ(LaunchScaledCastToFloat8BothLayouts(KernelDtypeFor(c.dtype), hp.data_ptr(),
                                                scale.data_ptr<float>(), c.rows, c.cols, row_stride,
                                                col_stride, KernelFloat8(), static_cast<float>(max),
                                                out.data_ptr(), out_t.data_ptr(), nullptr),
            cudaSuccess);
  EXPECT_TRUE(at::equal(out, want));
  EXPECT_TRUE(at::equal(out_t, want.t().contiguous()));
}

TEST_P(EmulatedFloat8CastTest, RowMajorEqualsAtenByteForByte) {
  const CastCase c = GetParam();
  at::Tensor out = at::full({c.rows, c.cols}, 0x7f, at::kByte);
  ASSERT_EQ(
      LaunchScaledCastToFloat8(KernelDtypeFor(c.dtype), hp.data_ptr(), scale.data_ptr<float>(),
                               c.rows, c.cols, row_stride, col_stride, KernelFloat8(),
                               static_cast<float>(max), out.data_ptr(), nullptr),
      cudaSuccess);
  EXPECT_TRUE(at::equal(out, want));
}

// Wide tiles (both dims multiples of 8; whole and cut 64 x 64 tiles), the 32 x 32 path (cut
// tiles), 16-byte chunks and single elements in rows, every scale shape, both formats; a
// misaligned input, which must take the element paths (the build traps misaligned vectors).
INSTANTIATE_TEST_SUITE_P(
    Shapes, EmulatedFloat8CastTest,
    testing::Values(CastCase{64, 128, at::kBFloat16, 0, true},
                    CastCase{136, 200, at::kBFloat16, 1, true},
                    CastCase{72, 96, at::kFloat, 2, true}, CastCase{40, 64, at::kHalf, 0, false},
                    CastCase{37, 45, at::kBFloat16, 1, true},
                    CastCase{33, 70, at::kFloat, 2, false}, CastCase{9, 1001, at::kFloat, 0, true},
                    CastCase{64, 128, at::kBFloat16, 0, true, /*misaligned=*/true}));

TEST(EmulatedFloat8ScalesTest, EachScaleAndItsInverseFromItsAmax) {
  at::Tensor amax = at::rand({1000}) * at::exp2(at::randint(-30, 30, {1000}).to(at::kFloat));
  amax[0] = 0;
  amax[1] = INFINITY;
  amax[2] = NAN;
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor a = amax.to(dtype);
    at::Tensor scale = at::full({1000}, -1.0f);
    at::Tensor inverse = at::full({1000}, -1.0f);
    ASSERT_EQ(
        LaunchFloat8ScalesFromAmax(KernelDtypeFor(dtype), a.data_ptr(), 1000, 448.0,
                                   scale.data_ptr<float>(), inverse.data_ptr<float>(), nullptr),
        cudaSuccess);
    for (int64_t i = 0; i < 1000; ++i) {
      const float want = Float8ScaleFromAmax(a[i].item<double>(), 448.0);
      const float got = scale[i].item<float>();
      EXPECT_TRUE(got == want || (std::isnan(got) && std::isnan(want))) << i;
      EXPECT_TRUE(inverse[i].item<float>() == 1.0f / want ||
                  (std::isnan(inverse[i].item<float>()) && std::isnan(want)))
          << i;
    }
  }
}

// --- cross-entropy -----------------------------------------------------------------------------

class EmulatedCrossEntropyTest
    : public testing::TestWithParam<std::tuple<at::ScalarType, int64_t>> {};

// Per-row losses and the logits' gradient against ATen's log_softmax in fp32: the kernels reduce
// a row in another order (a few fp32 roundings apart); ignored rows count nothing.
TEST_P(EmulatedCrossEntropyTest, LossAndGradientMatchAten) {
  const auto [dtype, vocab] = GetParam();
  const int64_t rows = 6;
  const int64_t ignore_index = -100;
  at::manual_seed(0);
  const at::Tensor logits = (at::randn({rows, vocab}) * 3).to(dtype);
  at::Tensor labels = at::randint(0, vocab, {rows}, at::kLong);
  labels[2] = ignore_index;
  std::vector<SoftmaxStats> stats(rows);
  at::Tensor loss = at::full({rows}, -1.0f);
  ASSERT_EQ(LaunchCrossEntropyForward(KernelDtypeFor(dtype), logits.data_ptr(),
                                      labels.data_ptr<int64_t>(), rows, vocab, ignore_index,
                                      stats.data(), loss.data_ptr<float>(), nullptr),
            cudaSuccess);
  const at::Tensor log_probs = at::log_softmax(logits.to(at::kFloat), 1);
  const at::Tensor counted = labels.ne(ignore_index);
  const at::Tensor want_loss =
      -log_probs.gather(1, labels.clamp_min(0).unsqueeze(1)).squeeze(1) * counted;
  EXPECT_TRUE(at::allclose(loss, want_loss, 1e-5, 1e-6)) << loss << want_loss;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(stats[r].max, logits[r].to(at::kFloat).max().item<float>()) << r;
  }
  const at::Tensor upstream = at::full({}, 0.5f);
  at::Tensor grad = at::full({rows, vocab}, 7.0).to(dtype);
  ASSERT_EQ(LaunchCrossEntropyBackward(
                KernelDtypeFor(dtype), logits.data_ptr(), labels.data_ptr<int64_t>(), stats.data(),
                upstream.data_ptr<float>(), rows, vocab, ignore_index, grad.data_ptr(), nullptr),
            cudaSuccess);
  const at::Tensor one_hot =
      at::zeros({rows, vocab}).scatter_(1, labels.clamp_min(0).unsqueeze(1), 1.0);
  const at::Tensor want_grad = (log_probs.exp() - one_hot) * 0.5 * counted.unsqueeze(1);
  const double rtol = dtype == at::kFloat ? 1e-5 : 1.0 / 128;  // a bf16 rounding
  EXPECT_TRUE(at::allclose(grad.to(at::kFloat), want_grad, rtol, 1e-6));
}

// 16-byte chunks (vocab a multiple of 8) and single elements (odd vocab), fp32 and bf16.
INSTANTIATE_TEST_SUITE_P(DtypesAndVocabularies, EmulatedCrossEntropyTest,
                         testing::Combine(testing::Values(at::kFloat, at::kBFloat16),
                                          testing::Values(int64_t{4096}, int64_t{1001})));

// --- RoPE and SwiGLU ---------------------------------------------------------------------------

class EmulatedRopeTest
    : public testing::TestWithParam<std::tuple<at::ScalarType, RopePairing, bool, int64_t>> {};

// Every pair of every row rotated as RotatePair rotates it, by the row's angles (or their
// negatives), cos/sin per batch row or broadcast.
TEST_P(EmulatedRopeTest, EveryPairRotatesAsRotatePair) {
  const auto [dtype, pairing, inverse, head_dim] = GetParam();
  for (const bool broadcast : {true, false}) {
    RopeDims d;
    d.batch = 2;
    d.seq = 9;
    d.heads = 3;
    d.head_dim = head_dim;
    d.broadcast_batch = broadcast;
    d.pairing = pairing;
    at::manual_seed(0);
    const at::Tensor x = at::randn({d.batch, d.seq, d.heads, d.head_dim}).to(dtype);
    const at::Tensor angles = at::rand({broadcast ? 1 : d.batch, d.seq, 1, d.head_dim / 2}) * 6;
    const at::Tensor cos = angles.cos();
    const at::Tensor sin = angles.sin();
    at::Tensor out = at::full(x.sizes(), 7.0).to(dtype);
    ASSERT_EQ(LaunchRope(KernelDtypeFor(dtype), x.data_ptr(), cos.data_ptr<float>(),
                         sin.data_ptr<float>(), d, inverse, out.data_ptr(), nullptr),
              cudaSuccess);
    const at::Tensor xf = x.to(at::kFloat).contiguous();
    at::Tensor want = at::empty_like(xf);
    const float* in = xf.data_ptr<float>();
    float* w = want.data_ptr<float>();
    for (int64_t r = 0; r < d.rows(); ++r) {
      const RopeRowStart start = RopeRowStartOf(r, d);
      for (int64_t j = 0; j < d.head_dim / 2; ++j) {
        const RopePairInRow pair = RopePairOf(j, d);
        const float c = cos.data_ptr<float>()[start.angle + j];
        const float s = sin.data_ptr<float>()[start.angle + j];
        const RotatedPair rotated =
            RotatePair(in[start.x + pair.first], in[start.x + pair.second], c, inverse ? -s : s);
        w[start.x + pair.first] = rotated.first;
        w[start.x + pair.second] = rotated.second;
      }
    }
    EXPECT_TRUE(at::equal(out, want.to(dtype))) << "broadcast " << broadcast;
  }
}

INSTANTIATE_TEST_SUITE_P(
    DtypesPairingsDirections, EmulatedRopeTest,
    testing::Combine(testing::Values(at::kFloat, at::kBFloat16),
                     testing::Values(RopePairing::kInterleaved, RopePairing::kHalves),
                     testing::Bool(), testing::Values(int64_t{6}, int64_t{128})));

class EmulatedSwiGluTest : public testing::TestWithParam<std::tuple<at::ScalarType, int64_t>> {};

// Forward and backward, element by element as SwiGluElement and SwiGluElementBackward.
TEST_P(EmulatedSwiGluTest, EveryElementAsItsMath) {
  const auto [dtype, n] = GetParam();
  at::manual_seed(0);
  const at::Tensor gate = (at::randn({n}) * 4).to(dtype);
  const at::Tensor up = at::randn({n}).to(dtype);
  const at::Tensor grad = at::randn({n}).to(dtype);
  at::Tensor out = at::full({n}, 7.0).to(dtype);
  at::Tensor grad_gate = at::full({n}, 7.0).to(dtype);
  at::Tensor grad_up = at::full({n}, 7.0).to(dtype);
  ASSERT_EQ(LaunchSwiGluForward(KernelDtypeFor(dtype), gate.data_ptr(), up.data_ptr(), n,
                                out.data_ptr(), nullptr),
            cudaSuccess);
  ASSERT_EQ(
      LaunchSwiGluBackward(KernelDtypeFor(dtype), grad.data_ptr(), gate.data_ptr(), up.data_ptr(),
                           n, grad_gate.data_ptr(), grad_up.data_ptr(), nullptr),
      cudaSuccess);
  const at::Tensor g = gate.to(at::kFloat), u = up.to(at::kFloat), o = grad.to(at::kFloat);
  at::Tensor want = at::empty({n}), want_gate = at::empty({n}), want_up = at::empty({n});
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g.data_ptr<float>()[i], ui = u.data_ptr<float>()[i];
    want.data_ptr<float>()[i] = SwiGluElement(gi, ui);
    const SwiGluGrads grads = SwiGluElementBackward(o.data_ptr<float>()[i], gi, ui);
    want_gate.data_ptr<float>()[i] = grads.gate;
    want_up.data_ptr<float>()[i] = grads.up;
  }
  EXPECT_TRUE(at::equal(out, want.to(dtype)));
  EXPECT_TRUE(at::equal(grad_gate, want_gate.to(dtype)));
  EXPECT_TRUE(at::equal(grad_up, want_up.to(dtype)));
}

// 16-byte chunks (n a multiple of 8) and single elements, fp32 and bf16.
INSTANTIATE_TEST_SUITE_P(DtypesAndSizes, EmulatedSwiGluTest,
                         testing::Combine(testing::Values(at::kFloat, at::kBFloat16),
                                          testing::Values(int64_t{4096}, int64_t{1001})));

}  // namespace
}  // namespace titan
