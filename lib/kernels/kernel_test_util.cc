#include "lib/kernels/kernel_test_util.h"

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

}  // namespace titan
