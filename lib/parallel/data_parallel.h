#ifndef TITAN_LIB_PARALLEL_DATA_PARALLEL_H_
#define TITAN_LIB_PARALLEL_DATA_PARALLEL_H_

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/distributed/communicator.h"
#include "lib/parallel/ddp.h"
#include "lib/parallel/fsdp.h"
#include "lib/parallel/sharded_state.h"
#include "lib/train/grad_clip.h"

namespace titan {

// What the trainer calls around forward, backward, clipping and checkpoints, whichever data
// parallel style the model got (none, DDP, FSDP, HSDP). Default-constructed: one replica, no-ops.
class DataParallel : public ShardedState {
 public:
  DataParallel() = default;
  // DDP: `ddp` averages gradients over the replicas.
  explicit DataParallel(std::unique_ptr<DdpGradientReducer> ddp) : ddp_(std::move(ddp)) {}
  // FSDP/HSDP: `groups` hold every parameter's shard; `root` (one of them, or null) is gathered
  // around the whole forward; `shard` is the group the parameters are sharded over.
  DataParallel(std::vector<std::unique_ptr<FsdpParamGroup>> groups, FsdpParamGroup* root,
               Communicator* shard);

  bool sharded() const { return shard_ != nullptr; }

  // Runs the model's forward, with the root group's parameters gathered (kept for backward).
  at::Tensor Forward(const std::function<at::Tensor()>& forward);
  // Before each microbatch's backward: DDP communicates on the last one only.
  void BeginBackward(bool last_microbatch);
  // After the last backward of a step: gradients are then averaged over data-parallel ranks.
  absl::Status FinishBackward();
  // ClipGradNorm's reduction over shards (null when every rank holds whole gradients).
  SquaredNormReducer GradNormReducer();

  // Checkpoint support. `local` holds parameters or optimizer state as this rank has them (a
  // sharded parameter's state named "<param>.<state>"). The full tensors: shard-shaped entries
  // all-gathered, others as they are. A collective when sharded.
  absl::StatusOr<NamedTensors> GatherFull(const NamedTensors& local) const override;
  // This rank's pieces for a distributed checkpoint: a shard-shaped entry becomes a view of its
  // rows without padding (loading into it fills the shard), its box added to `boxes`; other
  // entries as they are.
  NamedTensors CheckpointPieces(const NamedTensors& local, TensorBoxes& boxes) const override;

 private:
  using ParamIndex = std::pair<const FsdpParamGroup*, const FsdpParamGroup::Param*>;
  // The sharded parameter `name` belongs to ("<param>" or "<param>.<state>"), when `tensor` has
  // its shard's shape; else null.
  const FsdpParamGroup::Param* ShardedParamOf(const std::string& name, const at::Tensor& tensor,
                                              const FsdpParamGroup** group) const;

  std::unique_ptr<DdpGradientReducer> ddp_;
  std::vector<std::unique_ptr<FsdpParamGroup>> groups_;
  FsdpParamGroup* root_ = nullptr;
  Communicator* shard_ = nullptr;
  absl::flat_hash_map<std::string, ParamIndex> by_name_;
};

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_DATA_PARALLEL_H_
