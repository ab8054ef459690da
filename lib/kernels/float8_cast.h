#ifndef TITAN_LIB_KERNELS_FLOAT8_CAST_H_
#define TITAN_LIB_KERNELS_FLOAT8_CAST_H_

#include <ATen/ATen.h>

#include "absl/status/status.h"

namespace titan {

// The largest finite value of float8_e4m3fn (448) or float8_e5m2 (57344).
double Float8MaxOf(at::ScalarType dtype);

// OK when FusedScaledCastToFloat8 takes these: `hp` a 2-D fp32, bf16 or fp16 tensor, row-major or
// the transpose of a row-major one, on the CPU or an sm_90 GPU; `scale` fp32 on hp's device, one
// value, one per row ([rows, 1]) or one per column ([1, cols]); `dtype` float8_e4m3fn or e5m2.
absl::Status FusedFloat8CastSupports(const at::Tensor& hp, const at::Tensor& scale,
                                     at::ScalarType dtype);

// (hp in fp32 · scale) saturated to ±Float8MaxOf(dtype) and rounded to `dtype`, in one pass and
// in hp's layout: the CUDA kernel on a GPU, the same math (float8_cast_math.h) in a loop on the
// CPU (the reference the tests hold against ATen's composition). Not differentiable. Throws
// c10::Error on what FusedFloat8CastSupports refuses.
at::Tensor FusedScaledCastToFloat8(const at::Tensor& hp, const at::Tensor& scale,
                                   at::ScalarType dtype);

// A float8 cast's scale and its fp32 reciprocal (the operand scale _scaled_mm takes).
struct Float8Scales {
  at::Tensor scale;
  at::Tensor inverse;
};

// OK when FusedFloat8ScalesFromAmax takes `amax`: a contiguous fp32, bf16 or fp16 tensor on an
// sm_90 GPU with the kernels on (on the CPU, ATen's ops cost no launches to save).
absl::Status FusedFloat8ScalesSupports(const at::Tensor& amax);

// The dynamic scales for `dtype` from maxima `amax` (Float8ScaleFromAmax, the bits of
// lib/float8's Float8ScaleOf without power-of-2 rounding) and their reciprocals, fp32 in amax's
// shape, in one launch (ATen's ops take five, and one more for each reciprocal). Throws c10::Error
// on what FusedFloat8ScalesSupports refuses.
Float8Scales FusedFloat8ScalesFromAmax(const at::Tensor& amax, at::ScalarType dtype);

// One float8 cast in both layouts _scaled_mm takes an operand in; both have hp's sizes.
struct Float8CastLayouts {
  at::Tensor row_major;
  at::Tensor column_major;
};

// FusedScaledCastToFloat8's values in both layouts, from one read of `hp` on a GPU (a float8
// operand used by one matmul in each layout, as forward's and backward's, is cast once instead
// of cast and transposed). On the CPU: the cast, then its transposed copy.
Float8CastLayouts FusedScaledCastToFloat8BothLayouts(const at::Tensor& hp, const at::Tensor& scale,
                                                     at::ScalarType dtype);

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_FLOAT8_CAST_H_
