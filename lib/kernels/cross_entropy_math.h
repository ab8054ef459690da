#ifndef TITAN_LIB_KERNELS_CROSS_ENTROPY_MATH_H_
#define TITAN_LIB_KERNELS_CROSS_ENTROPY_MATH_H_

#include <math.h>

#include "lib/kernels/host_device.h"

namespace titan {

// A running log-sum-exp in one pass (online softmax): the largest value seen and the sum of
// exp(x - max); parts computed apart merge as one pass over both would, up to rounding. A NaN
// stays in the sum; -inf adds nothing.
struct LogSumExpPart {
  float max = -INFINITY;
  float sum = 0;
};

TITAN_HOST_DEVICE void AddToLogSumExp(LogSumExpPart& part, float x) {
  if (x > part.max) {
    part.sum = part.sum * expf(part.max - x) + 1.0f;
    part.max = x;
  } else if (x != -INFINITY) {
    part.sum += expf(x - part.max);
  }
}

TITAN_HOST_DEVICE LogSumExpPart MergeLogSumExp(const LogSumExpPart& a, const LogSumExpPart& b) {
  if (a.sum == 0) return b;  // nothing but -inf (a NaN sum is not 0: it carries on)
  if (b.sum == 0) return a;
  const float max = a.max > b.max ? a.max : b.max;
  return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

// A row's softmax statistics, kept from forward to backward: as ATen's log_softmax computes
// x - max - log_sum, never rounding max + log_sum (a confident token's 1 - p is smaller than
// that rounding).
struct SoftmaxStats {
  float max;
  float log_sum;
};

TITAN_HOST_DEVICE SoftmaxStats SoftmaxStatsOf(const LogSumExpPart& part) {
  return {part.max, logf(part.sum)};
}

// -log softmax(x)[label] for the label's logit.
TITAN_HOST_DEVICE float CrossEntropyLoss(const SoftmaxStats& row, float label_logit) {
  return row.log_sum - (label_logit - row.max);
}

// d(sum of the rows' cross-entropy)/d(logit) for upstream gradient `grad`: as ATen's log_softmax
// backward after nll_loss's, grad · (softmax(x) - [x is the label's logit]).
TITAN_HOST_DEVICE float CrossEntropyGradElement(float x, const SoftmaxStats& row, bool is_label,
                                                float grad) {
  const float p = expf((x - row.max) - row.log_sum) * grad;
  return is_label ? p - grad : p;
}

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_CROSS_ENTROPY_MATH_H_
