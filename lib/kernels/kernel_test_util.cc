#include "lib/kernels/kernel_test_util.h"

#include <limits>

#include "lib/kernels/cross_entropy.h"

namespace titan {
namespace {

// SwiGLU's output and both gradients for `grad`, through `op`.
struct SwiGluResult {
  at::Tensor out;
  at::Tensor grad_gate;
  at::Tensor grad_up;
};

SwiGluResult SwiGluForwardBackward(SwiGluOp op, const at::Tensor& gate, const at::Tensor& up,
                                   const at::Tensor& grad) {
  const at::Tensor g = gate.clone().requires_grad_();
  const at::Tensor u = up.clone().requires_grad_();
  const at::Tensor out = op(g, u);
  out.backward(grad);
  return {out.detach(), g.grad(), u.grad()};
}

at::Tensor AtenSwiGlu(const at::Tensor& gate, const at::Tensor& up) { return at::silu(gate) * up; }

}  // namespace

testing::AssertionResult AllClose(const at::Tensor& got, const at::Tensor& want, Tolerance tol) {
  if (got.sizes() != want.sizes() || got.scalar_type() != want.scalar_type()) {
    return testing::AssertionFailure() << "got " << got.sizes() << " " << got.scalar_type()
                                       << ", want " << want.sizes() << " " << want.scalar_type();
  }
  const at::Tensor g = got.detach().cpu().to(at::kDouble).flatten();
  const at::Tensor w = want.detach().cpu().to(at::kDouble).flatten();
  const at::Tensor excess = (g - w).abs() - (tol.atol + tol.rtol * w.abs());
  // NaN excess (both NaN, or equal infinities) passes; a NaN on one side only fails.
  const at::Tensor bad = excess.gt(0).logical_or(g.isnan().logical_xor(w.isnan()));
  const int64_t count = bad.sum().item<int64_t>();
  if (count == 0) return testing::AssertionSuccess();
  const int64_t i = at::where(bad, excess.nan_to_num(1e300), -1e300).argmax().item<int64_t>();
  return testing::AssertionFailure()
         << count << " of " << g.numel() << " elements beyond rtol " << tol.rtol << " atol "
         << tol.atol << "; worst at " << i << ": got " << g[i].item<double>() << ", want "
         << w[i].item<double>();
}


void ExpectSwiGluMatchesAten(SwiGluOp fused, const at::Tensor& gate, const at::Tensor& up,
                             const at::Tensor& grad, Tolerance tol) {
  const SwiGluResult got = SwiGluForwardBackward(fused, gate, up, grad);
  const SwiGluResult want = SwiGluForwardBackward(AtenSwiGlu, gate, up, grad);
  EXPECT_TRUE(AllClose(got.out, want.out, tol));
  EXPECT_TRUE(AllClose(got.grad_gate, want.grad_gate, tol));
  EXPECT_TRUE(AllClose(got.grad_up, want.grad_up, tol));
  if (gate.scalar_type() == at::kFloat) return;
  const SwiGluResult exact = SwiGluForwardBackward(AtenSwiGlu, gate.to(at::kDouble),
                                                   up.to(at::kDouble), grad.to(at::kDouble));
  EXPECT_LT(MeanRelativeError(got.out, exact.out), MeanRelativeError(want.out, exact.out));
  EXPECT_LT(MeanRelativeError(got.grad_gate, exact.grad_gate),
            MeanRelativeError(want.grad_gate, exact.grad_gate));
  EXPECT_LT(MeanRelativeError(got.grad_up, exact.grad_up),
            MeanRelativeError(want.grad_up, exact.grad_up));
}

double MeanRelativeError(const at::Tensor& t, const at::Tensor& exact) {
  const at::Tensor e = exact.detach().cpu().to(at::kDouble);
  return ((t.detach().cpu().to(at::kDouble) - e).abs() / (e.abs() + 1e-6)).mean().item<double>();
}

std::vector<RopeCase> AllRopeCases() {
  std::vector<RopeCase> cases;
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kRotateHalf}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      for (bool per_batch_positions : {false, true}) {
        cases.push_back({layout, dtype, per_batch_positions});
      }
    }
  }
  return cases;
}

RopePairing PairingOf(RopeLayout layout) {
  return layout == RopeLayout::kInterleaved ? RopePairing::kInterleaved : RopePairing::kHalves;
}

CrossEntropyCase MakeCrossEntropyCase(int64_t rows, int64_t vocab, at::ScalarType dtype,
                                      at::Device device) {
  at::manual_seed(0);
  const auto options = at::TensorOptions().device(device);
  at::Tensor logits = at::randn({rows, vocab}, options) * 3;
  at::Tensor labels = at::randint(vocab, {rows}, options.dtype(at::kLong));
  labels.index_put_({at::arange(0, rows, 5, options.dtype(at::kLong))}, -100);
  // Two finite logits 15 apart: every order sums exp(x - max) to the same 1 + 3e-7.
  const int64_t label = labels[1].item<int64_t>();
  logits[1].fill_(-std::numeric_limits<float>::infinity());
  logits[1][label] = 24.0;
  logits[1][(label + 1) % vocab] = 9.0;
  logits[2].slice(0, 0, 4).fill_(-std::numeric_limits<float>::infinity());
  labels[2] = vocab - 1;
  return {logits.to(dtype), labels};
}

void ExpectCrossEntropyMatchesAten(const CrossEntropyCase& c, double loss_rtol) {
  const at::Tensor mine = c.logits.clone().requires_grad_();
  const at::Tensor ref = c.logits.clone().requires_grad_();
  const at::Tensor loss = FusedCrossEntropySum(mine, c.labels, -100);
  const at::Tensor want =
      at::cross_entropy_loss(ref.to(at::kFloat), c.labels, {}, at::Reduction::Sum, -100, 0.0);
  EXPECT_NEAR(loss.item<double>(), want.item<double>(), loss_rtol * want.item<double>());
  const double upstream = 0.5;
  (loss * upstream).backward();
  (want * upstream).backward();
  ASSERT_EQ(mine.grad().scalar_type(), c.logits.scalar_type());
  const at::Tensor got = mine.grad().to(at::kDouble);  // compared where it is: GBs on a GPU
  const at::Tensor expected = ref.grad().to(at::kDouble);
  const at::Tensor difference = (got - expected).abs();
  if (c.logits.scalar_type() == at::kFloat) {
    EXPECT_LE(difference.max().item<double>(), 1e-6 * expected.abs().max().item<double>());
  } else {
    const at::Tensor over = difference > expected.abs() * 0x1p-7;
    EXPECT_FALSE(over.any().item<bool>())
        << over.sum().item<int64_t>() << " gradient entries off by more than their bound, the "
        << "first at " << over.nonzero()[0];
  }
  EXPECT_EQ(got[0].abs().max().item<double>(), 0.0);  // an ignored row
  EXPECT_TRUE(at::isfinite(got).all().item<bool>());
}

double MaxRelativeError(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want).abs().max() / want.abs().max()).item<double>();
}

}  // namespace titan
