#ifndef TITAN_LIB_KERNELS_CROSS_ENTROPY_MATH_H_
#define TITAN_LIB_KERNELS_CROSS_ENTROPY_MATH_H_

#include <math.h>

#include "lib/kernels/host_device.h"

namespace titan {

// A running log-sum-exp in one pass (online softmax): the largest value seen and the sum of
// exp(x - max); parts computed apart merge exactly as one pass over both would, up to rounding.
struct LogSumExpPart {
  float max = -INFINITY;
  float sum = 0;
};

TITAN_HOST_DEVICE void AddToLogSumExp(LogSumExpPart& part, float x) {
  if (x > part.max) {
    part.sum = part.sum * expf(part.max - x) + 1.0f;
    part.max = x;
  } else {
    part.sum += expf(x - part.max);
  }
}

TITAN_HOST_DEVICE LogSumExpPart MergeLogSumExp(const LogSumExpPart& a, const LogSumExpPart& b) {
  if (a.max == -INFINITY) return b;
  if (b.max == -INFINITY) return a;
  const float max = a.max > b.max ? a.max : b.max;
  return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

TITAN_HOST_DEVICE float LogSumExpOf(const LogSumExpPart& part) { return part.max + logf(part.sum); }

// d(sum of the rows' cross-entropy)/d(logit) for upstream gradient `grad`: as ATen's log_softmax
// backward after nll_loss's, grad · (exp(x - lse) - [x is the label's logit]).
TITAN_HOST_DEVICE float CrossEntropyGradElement(float x, float lse, bool is_label, float grad) {
  const float p = expf(x - lse) * grad;
  return is_label ? p - grad : p;
}

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_CROSS_ENTROPY_MATH_H_
