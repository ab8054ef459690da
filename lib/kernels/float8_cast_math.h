#ifndef TITAN_LIB_KERNELS_FLOAT8_CAST_MATH_H_
#define TITAN_LIB_KERNELS_FLOAT8_CAST_MATH_H_

#include <stdint.h>

#include "lib/kernels/host_device.h"

namespace titan {

// x · scale in fp32, saturated to ±max (the float8 format's largest finite value): what a float8
// cast rounds (a value past max would round to NaN). NaN stays NaN, as at::clamp keeps it.
TITAN_HOST_DEVICE float ScaleSaturate(float x, float scale, float max) {
  const float v = x * scale;
  if (v != v) return v;
  return v < -max ? -max : (v > max ? max : v);
}

// torchao's dynamic scale from a tensor's largest magnitude, in lib/float8's Float8ScaleOf's
// order of ATen ops: the fp64 reciprocal of the amax clamped below at 1e-12 (NaN kept, as
// clamp_min), times the format's largest value, rounded to fp32.
TITAN_HOST_DEVICE float Float8ScaleFromAmax(double amax, double max) {
  const double clamped = amax < 1e-12 ? 1e-12 : amax;
  return static_cast<float>((1.0 / clamped) * max);
}

// The scale of element (row, col) of a [rows, cols] tensor whose scale broadcasts with these
// strides (0 along a dim the scale does not vary in: tensorwise, per row or per column). The
// kernels loop over a row's columns inside a loop over rows: no division per element.
TITAN_HOST_DEVICE int64_t ScaleIndex(int64_t row, int64_t col, int64_t row_stride,
                                     int64_t col_stride) {
  return row * row_stride + col * col_stride;
}

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_FLOAT8_CAST_MATH_H_
