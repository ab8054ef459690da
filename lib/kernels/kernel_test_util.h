#ifndef TITAN_LIB_KERNELS_KERNEL_TEST_UTIL_H_
#define TITAN_LIB_KERNELS_KERNEL_TEST_UTIL_H_

#include <ATen/ATen.h>

#include <vector>

#include "gtest/gtest.h"
#include "lib/kernels/rope.h"
#include "lib/model/rope.h"

namespace titan {

// |got - want| <= atol + rtol * |want| element by element (NaN matching NaN).
struct Tolerance {
  double rtol;
  double atol;
};

// Success, or the worst element (index, got, want, its bound) and how many exceed their bounds.
testing::AssertionResult AllClose(const at::Tensor& got, const at::Tensor& want, Tolerance tol);

using SwiGluOp = at::Tensor (*)(const at::Tensor& gate, const at::Tensor& up);

// `fused` and ATen's silu(gate) * up agree on the output and both gradients within `tol`;
// in bf16/fp16 the fused results (rounded once) are also the closer to fp64's.
void ExpectSwiGluMatchesAten(SwiGluOp fused, const at::Tensor& gate, const at::Tensor& up,
                             const at::Tensor& grad, Tolerance tol);

// One fused-RoPE test case: the model's layout, the tensors' dtype, and the rotation's form.
struct RopeCase {
  RopeLayout layout;
  at::ScalarType dtype;
  bool per_batch_positions;  // cos/sin [B, S, 1, D/2], else [1, S, 1, D/2]
};

// Every layout x fp32/bf16/fp16 x both rotation forms.
std::vector<RopeCase> AllRopeCases();

// The fused op's pairing of a model layout.
RopePairing PairingOf(RopeLayout layout);

// The mean of |t - exact| / (|exact| + 1e-6), in fp64: which of two roundings is the closer.
double MeanRelativeError(const at::Tensor& t, const at::Tensor& exact);

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_KERNEL_TEST_UTIL_H_
