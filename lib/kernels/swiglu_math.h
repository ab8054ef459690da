#ifndef TITAN_LIB_KERNELS_SWIGLU_MATH_H_
#define TITAN_LIB_KERNELS_SWIGLU_MATH_H_

#include <math.h>

#include "lib/kernels/host_device.h"

namespace titan {

// silu(gate) * up in fp32, silu as ATen computes it: gate / (1 + exp(-gate)).
TITAN_HOST_DEVICE float SwiGluElement(float gate, float up) {
  return gate / (1.0f + expf(-gate)) * up;
}

struct SwiGluGrads {
  float gate;
  float up;
};

// The gradients of SwiGluElement for the output's gradient `grad`; silu's derivative as ATen's
// silu_backward: sigmoid * (1 + gate * (1 - sigmoid)).
TITAN_HOST_DEVICE SwiGluGrads SwiGluElementBackward(float grad, float gate, float up) {
  const float denominator = 1.0f + expf(-gate);
  const float sigmoid = 1.0f / denominator;
  return {grad * up * sigmoid * (1.0f + gate * (1.0f - sigmoid)), grad * (gate / denominator)};
}

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_SWIGLU_MATH_H_
