#ifndef TITAN_LIB_TRAIN_GRAD_CLIP_H_
#define TITAN_LIB_TRAIN_GRAD_CLIP_H_

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace titan {

// The global squared norm from this rank's per-parameter squared gradient norms ([n] fp32, in the
// order ClipGradNorm got the parameters, 0 without a gradient): parallel code weighs and sums them
// across ranks (each shard once, each replicated parameter once); one process passes none.
using SquaredNormReducer = std::function<at::Tensor(const at::Tensor& squared_norms)>;

// Global-norm gradient clipping as torch.nn.utils.clip_grad_norm_, but shard-aware: each rank's
// squared norm is reduced before the scale is taken. Returns the total norm before clipping.
at::Tensor ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm,
                        const SquaredNormReducer& reduce = nullptr);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_GRAD_CLIP_H_
