#ifndef TITAN_LIB_TRAIN_GRAD_CLIP_H_
#define TITAN_LIB_TRAIN_GRAD_CLIP_H_

#include <ATen/ATen.h>

#include <functional>
#include <vector>

namespace titan {

// The global squared norm from this rank's per-parameter squared gradient norms ([n] fp32, in the
// order ComputeGradClip got the parameters, 0 without a gradient): parallel code weighs and sums
// them across ranks (each shard once, each replicated parameter once); one process passes none.
using SquaredNormReducer = std::function<at::Tensor(const at::Tensor& squared_norms)>;

struct GradClip {
  at::Tensor total_norm;  // before clipping
  // What clipping multiplies the gradients by, min(1, max_norm / (total_norm + 1e-6)) as torch;
  // undefined when max_norm <= 0 or no parameter has a gradient.
  at::Tensor scale;
};

// Global-norm clipping's norm and scale as torch.nn.utils.clip_grad_norm_, but shard-aware: each
// rank's squared norm is reduced before the scale is taken. The gradients are not touched:
// Optimizer::Step(scale) applies the scale (within its update where it can).
GradClip ComputeGradClip(const std::vector<at::Tensor>& params, double max_norm,
                         const SquaredNormReducer& reduce = nullptr);

// Multiplies each defined gradient of `params` by `scale` (an fp32 scalar; undefined: nothing) as
// torch.nn.utils.clip_grad_norm_ does after ComputeGradClip: one foreach kernel on CUDA (for fp32
// gradients), a multiply per tensor on the CPU.
void ScaleGrads(const std::vector<at::Tensor>& params, const at::Tensor& scale);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_GRAD_CLIP_H_
