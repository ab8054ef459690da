#ifndef TITAN_LIB_TRAIN_CUDA_GRAPH_H_
#define TITAN_LIB_TRAIN_CUDA_GRAPH_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/model/module.h"
#include "lib/train/loss.h"

namespace at::cuda {
struct CUDAGraph;
}  // namespace at::cuda

namespace titan {

// [compile] cuda_graph: a microbatch's forward, loss and backward captured once as a CUDA graph
// and replayed, so each microbatch is one graph launch instead of hundreds of kernel launches from
// the host (what torch.compile's mode="reduce-overhead" does; the optimizer and clipping stay
// eager: a few multi-tensor kernels, and a learning rate that changes every step).
//
// The first `eager_steps` steps run eagerly (lazy initialisation: cuBLAS and cuDNN plans, SDPA's
// backend, the allocator's segments). The next step's first microbatch runs once more eagerly on
// the capture stream (the CUDA-graph warm-up rule), its gradients are zeroed again, and it is
// captured, then replayed; every later microbatch copies its batch into the captured inputs and
// replays. Gradients accumulate in place into the parameters' .grad, which must stay allocated
// between steps (Optimizer::ZeroGrad(/*set_to_none=*/false)). One process, static shapes.
class CudaGraphedMicrobatch {
 public:
  // Forward, loss and backward of `batch` (whose tensors it must read: the captured inputs while
  // capturing), returning the loss sum, detached. `loss_divisor`, which it divides the sum by
  // before backward, is a constant of the graph.
  using Body = std::function<at::Tensor(const Batch& batch)>;

  CudaGraphedMicrobatch(std::vector<ParamRef> params, int64_t eager_steps);
  ~CudaGraphedMicrobatch();

  // `body` on `batch`: eagerly, or captured and replayed as above. `first_of_step`: the step's
  // first microbatch (its gradients are zero so far). Fails when the batch's shapes or
  // `loss_divisor` differ from the captured ones, or when capture fails (an op that syncs with the
  // host, or is not capturable).
  absl::StatusOr<at::Tensor> Run(bool first_of_step, const Batch& batch, double loss_divisor,
                                 const Body& body);

 private:
  absl::Status Capture(const Batch& batch, const Body& body);
  absl::Status CopyInputs(const Batch& batch);
  void ZeroGrads();

  std::vector<ParamRef> params_;
  int64_t eager_steps_;
  int64_t steps_seen_ = 0;  // steps this process ran (a resumed run warms up again)
  std::unique_ptr<at::cuda::CUDAGraph> graph_;
  Batch inputs_;       // the captured inputs
  at::Tensor output_;  // the captured loss sum
  double loss_divisor_ = 0;
};

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_CUDA_GRAPH_H_
