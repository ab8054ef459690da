#ifndef TITAN_LIB_KERNELS_CROSS_ENTROPY_H_
#define TITAN_LIB_KERNELS_CROSS_ENTROPY_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "absl/status/status.h"

namespace titan {

// OK when FusedCrossEntropySum takes these: contiguous logits [N, V] (fp32, bf16 or fp16) on the
// CPU or an sm_90 GPU (the CUDA kernels on), int64 labels [N] on the same device.
absl::Status FusedCrossEntropySupports(const at::Tensor& logits, const at::Tensor& labels);

// The summed cross-entropy of the rows whose label is not `ignore_index` (an fp32 scalar), as
// at::cross_entropy_loss(logits.float(), labels, {}, Sum, ignore_index) computes it, in one pass
// over the logits forward and one backward, keeping only the logits, the labels and each row's
// max and log-sum between them (ATen keeps fp32 log-probabilities); the gradient comes in the
// logits' dtype, rounded once. A label outside [0, V) gives NaN. CUDA kernels on a GPU, the same
// math (cross_entropy_math.h) in a loop on the CPU: the reference the tests hold against ATen.
// Throws c10::Error on what FusedCrossEntropySupports refuses.
at::Tensor FusedCrossEntropySum(const at::Tensor& logits, const at::Tensor& labels,
                                int64_t ignore_index);

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_CROSS_ENTROPY_H_
