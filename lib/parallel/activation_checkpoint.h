#ifndef TITAN_LIB_PARALLEL_ACTIVATION_CHECKPOINT_H_
#define TITAN_LIB_PARALLEL_ACTIVATION_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <functional>

namespace titan {

using CheckpointedFn = std::function<at::Tensor(const at::Tensor&)>;

// Runs `fn(x)` without keeping its activations; backward recomputes them (PyTorch's reentrant
// checkpoint). `fn` must stay alive until backward and be deterministic.
at::Tensor CheckpointedCall(const CheckpointedFn& fn, const at::Tensor& x);

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_ACTIVATION_CHECKPOINT_H_
