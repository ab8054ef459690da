#ifndef TITAN_LIB_PARALLEL_ACTIVATION_CHECKPOINT_H_
#define TITAN_LIB_PARALLEL_ACTIVATION_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <functional>

namespace titan {

using CheckpointedFn = std::function<at::Tensor(const at::Tensor&)>;

// What backward recomputes of a checkpointed call.
enum class RecomputePolicy {
  kEverything,     // keep only the input (torchtitan's full AC)
  kCheapOpsOnly,   // keep attention and every second linear (torchtitan's op-level SAC; the
                   // model's matmuls must go through lib/model's Linear and Attention)
};

// Runs `fn(x)` without keeping its activations (as the policy says); backward recomputes them
// (PyTorch's reentrant checkpoint) under the forward's autocast state. `fn` must stay alive until
// backward and be deterministic.
at::Tensor CheckpointedCall(const CheckpointedFn& fn, const at::Tensor& x,
                            RecomputePolicy policy = RecomputePolicy::kEverything);

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_ACTIVATION_CHECKPOINT_H_
