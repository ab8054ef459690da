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

// Cross-entropy test inputs: logits [rows, vocab] (randn * 3) in `dtype` on `device`, with every
// 5th row ignored (label -100), row 1 a confident token (its label's logit 24, one other 9, the
// rest -inf: 1 - p = 3.6e-7, below the rounding of max + log-sum) and row 2's first 4 logits -inf
// (a masked vocabulary); rows >= 3.
struct CrossEntropyCase {
  at::Tensor logits;
  at::Tensor labels;
};
CrossEntropyCase MakeCrossEntropyCase(int64_t rows, int64_t vocab, at::ScalarType dtype,
                                      at::Device device);

// FusedCrossEntropySum against ATen's cross_entropy_loss on fp32 logits (titan's loss before it),
// upstream gradient 0.5: the loss within `loss_rtol` (fp32 sums in other orders); the gradient in
// fp32 within 1e-6 of its largest entry, else each entry within one rounding of its dtype (2^-7
// relative in bf16); ignored rows 0.
void ExpectCrossEntropyMatchesAten(const CrossEntropyCase& c, double loss_rtol);

// max |got - want| / max |want|, in fp64 (want's dtype, e.g. an fp64 reference).
double MaxRelativeError(const at::Tensor& got, const at::Tensor& want);

// The mean of |t - exact| / (|exact| + 1e-6), in fp64: which of two roundings is the closer.
double MeanRelativeError(const at::Tensor& t, const at::Tensor& exact);

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_KERNEL_TEST_UTIL_H_
