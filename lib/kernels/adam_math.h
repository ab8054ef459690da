#ifndef TITAN_LIB_KERNELS_ADAM_MATH_H_
#define TITAN_LIB_KERNELS_ADAM_MATH_H_

#include <math.h>
#include <stdint.h>

#include "lib/kernels/host_device.h"

namespace titan {

// Adam's settings as torch 2.11's CUDA _fused_adam(w)_ uses them for fp32 tensors: cast once from
// the optimizer's doubles to fp32.
struct AdamConstants {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  bool decoupled;  // AdamW: the decay scales the parameter, not the gradient
};

struct AdamBiasCorrections {
  float first;        // 1 - beta1^step
  float second_sqrt;  // sqrt(1 - beta2^step)
};

// For a parameter's step count (already advanced for this step).
TITAN_HOST_DEVICE AdamBiasCorrections AdamBiasCorrectionsFor(const AdamConstants& c, float step) {
  return {1 - powf(c.beta1, step), sqrtf(1 - powf(c.beta2, step))};
}

// One element's Adam step, written as torch 2.11's fp32 CUDA kernel (fused_adam_utils.cuh,
// adam_math) writes it, so nvcc compiles the same operations in the same order; the gradient is
// first multiplied by `grad_scale` (the clipping scale), rounded as _foreach_mul_ rounds it.
TITAN_HOST_DEVICE void AdamElement(const AdamConstants& c, const AdamBiasCorrections& bias,
                                   float grad_scale, float grad, float& param, float& exp_avg,
                                   float& exp_avg_sq) {
#if defined(__CUDA_ARCH__)
  grad = __fmul_rn(grad, grad_scale);  // never fused into a later multiply-add
#else
  grad = grad * grad_scale;
#endif
  if (c.weight_decay != 0) {
    if (c.decoupled) {
      param -= c.lr * c.weight_decay * param;
    } else {
      grad += param * c.weight_decay;
    }
  }
  exp_avg = fmaf(c.beta1, exp_avg, fmaf(-c.beta1, grad, grad));
  const float grad_squared = grad * grad;
  exp_avg_sq = fmaf(c.beta2, exp_avg_sq, fmaf(-c.beta2, grad_squared, grad_squared));
  const float step_size = c.lr / bias.first;
  const float denom = (sqrtf(exp_avg_sq) / bias.second_sqrt) + c.eps;
  param -= step_size * exp_avg / denom;
}

// The multi-tensor kernel's work split: tensor t's elements are chunks first_chunk[t] ..
// first_chunk[t + 1] - 1 of kAdamChunk elements (its last chunk may be short), and blocks take
// chunks in turn.
constexpr int64_t kAdamChunk = 4096;

struct AdamChunk {
  int tensor;
  int64_t begin;  // element range within the tensor
  int64_t end;
};

// Where chunk `chunk` (< first_chunk[count]) lies; first_chunk has count + 1 ascending entries,
// numel[t] the tensors' sizes.
TITAN_HOST_DEVICE AdamChunk LocateAdamChunk(const int64_t* first_chunk, const int64_t* numel,
                                            int count, int64_t chunk) {
  int low = 0;
  int high = count - 1;
  while (low < high) {  // the last tensor whose first chunk is at or before `chunk`
    const int middle = (low + high + 1) / 2;
    if (first_chunk[middle] <= chunk) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  const int64_t begin = (chunk - first_chunk[low]) * kAdamChunk;
  const int64_t end = begin + kAdamChunk < numel[low] ? begin + kAdamChunk : numel[low];
  return {low, begin, end};
}

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_ADAM_MATH_H_
