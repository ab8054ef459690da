#ifndef TITAN_LIB_TRAIN_GRAD_CLIP_H_
#define TITAN_LIB_TRAIN_GRAD_CLIP_H_

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace titan {

// Sums a squared norm across ranks; data-parallel code passes its all-reduce, one process none.
using SquaredNormReducer = std::function<void(at::Tensor& squared_norm)>;

// Global-norm gradient clipping as torch.nn.utils.clip_grad_norm_, but shard-aware: each rank's
// squared norm is reduced before the scale is taken. Returns the total norm before clipping.
at::Tensor ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm,
                        const SquaredNormReducer& reduce = nullptr);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_GRAD_CLIP_H_
