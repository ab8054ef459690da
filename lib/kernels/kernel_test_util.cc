#include "lib/kernels/kernel_test_util.h"

namespace titan {

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

SwiGluResult SwiGluForwardBackward(SwiGluOp op, const at::Tensor& gate, const at::Tensor& up,
                                   const at::Tensor& grad) {
  const at::Tensor g = gate.clone().requires_grad_();
  const at::Tensor u = up.clone().requires_grad_();
  const at::Tensor out = op(g, u);
  out.backward(grad);
  return {out.detach(), g.grad(), u.grad()};
}

at::Tensor AtenSwiGlu(const at::Tensor& gate, const at::Tensor& up) { return at::silu(gate) * up; }

double MeanRelativeError(const at::Tensor& t, const at::Tensor& exact) {
  const at::Tensor e = exact.detach().cpu().to(at::kDouble);
  return ((t.detach().cpu().to(at::kDouble) - e).abs() / (e.abs() + 1e-6)).mean().item<double>();
}

}  // namespace titan
