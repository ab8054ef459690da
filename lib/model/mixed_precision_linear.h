#ifndef TITAN_LIB_MODEL_MIXED_PRECISION_LINEAR_H_
#define TITAN_LIB_MODEL_MIXED_PRECISION_LINEAR_H_

#include <ATen/ATen.h>

namespace titan {

// x @ weightᵀ as autocast runs it (x and the fp32 weight cast to `dtype`, x through
// CastInputOnce; the product in `dtype`), but whose backward GEMMs write each input's
// gradient in that input's own dtype: the fp32 weight's gradient comes out of the GEMM's fp32
// accumulator, not rounded to bf16 and then cast (as autocast's ToCopyBackward does: a pass over
// every weight gradient, 15 ms of a Llama 3 8B-8-layer H200 step with the activations'). On the
// CPU, where ATen has no GEMM with another output dtype, the same product is formed in fp32.
// A defined `kept_output` (op-level selective checkpointing's replay) is returned instead of
// computing the product again.
at::Tensor MixedPrecisionLinear(const at::Tensor& x, const at::Tensor& weight, at::ScalarType dtype,
                                const at::Tensor& kept_output = at::Tensor());

// x cast to `dtype`, or the tensor the previous call on this thread returned when x is the same,
// unchanged tensor: wq, wk and wv (w1 and w3) cast and keep one copy of their normed input, not
// three (autocast casts per op). Known by weak references: holds nothing alive.
at::Tensor CastInputOnce(const at::Tensor& x, at::ScalarType dtype);

// Whether Linear takes MixedPrecisionLinear for these tensors: CUDA autocast to a lower precision
// in grad mode, an fp32 weight, x in fp32 or that precision, and the kernel switch on ([compile]
// fused_kernels, not "mixed_precision_linear" in disabled_kernels).
bool TakesMixedPrecisionLinear(const at::Tensor& x, const at::Tensor& weight);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_MIXED_PRECISION_LINEAR_H_
