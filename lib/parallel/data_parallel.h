#ifndef TITAN_LIB_PARALLEL_DATA_PARALLEL_H_
#define TITAN_LIB_PARALLEL_DATA_PARALLEL_H_

#include <ATen/ATen.h>

#include <cstdint>
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
#include "lib/model/module.h"
#include "lib/parallel/context_parallel.h"
#include "lib/parallel/ddp.h"
#include "lib/parallel/fsdp.h"
#include "lib/parallel/sharded_state.h"
#include "lib/parallel/tensor_parallel.h"
#include "lib/train/grad_clip.h"
#include "lib/train/head_loss.h"
#include "lib/train/loss.h"

namespace titan {

// What the trainer calls around forward, backward, clipping and checkpoints, whichever parallelism
// the model got: a data parallel style (none, DDP, FSDP, HSDP) and tensor and context parallelism
// on top. Default-constructed: one replica, no-ops.
class DataParallel : public ShardedState {
 public:
  DataParallel() = default;
  // DDP: `ddp` averages gradients over the replicas.
  explicit DataParallel(std::unique_ptr<DdpGradientReducer> ddp) : ddp_(std::move(ddp)) {}
  // FSDP/HSDP: `groups` hold every parameter's shard; `root` (one of them, or null) is gathered
  // around the whole forward, and with `reshard_root` freed after it and gathered again when
  // backward starts; `first_in_backward` (or null), the group backward needs first, is prefetched
  // then; `shard` is the group the parameters are sharded over.
  DataParallel(std::vector<std::unique_ptr<FsdpParamGroup>> groups, FsdpParamGroup* root,
               bool reshard_root, FsdpParamGroup* first_in_backward, Communicator* shard);

  // Tensor and context parallelism the model got before data parallelism (either may be null).
  void SetModelParallel(std::unique_ptr<TensorParallel> tensor_parallel,
                        std::unique_ptr<ContextParallel> context_parallel);

  bool sharded() const { return shard_ != nullptr; }
  // Ranks holding a share of each sequence (context parallelism), 1 without.
  int context_parallel_degree() const;

  // This rank's share of a batch its data-parallel group reads (context parallelism: a slice of
  // every sequence); the batch itself otherwise.
  absl::StatusOr<Batch> ShardBatch(const Batch& batch) const;
  // The loss of this model's last stage: with `loss` unset the cross-entropy (vocab-parallel when
  // the logits are vocabulary shards), fused with the head when `fused_chunk_tokens` > 0
  // ([training] loss_chunk_size); else `loss` on the logits (gathered first when they are shards).
  HeadLoss Loss(LossFn loss = nullptr, int64_t fused_chunk_tokens = 0) const;

  // Runs the model's forward, with the root group's parameters gathered (kept for backward).
  at::Tensor Forward(const std::function<at::Tensor()>& forward);
  // Every FSDP group gathered once for this object's life (for forwards without autograd): the
  // forwards within it communicate nothing (generation's token loop), at the cost of the whole
  // model in param_dtype on every rank. Every rank creates and destroys it at the same point.
  class GatheredScope {
   public:
    // Fails, holding nothing, when a gather fails.
    static absl::StatusOr<std::unique_ptr<GatheredScope>> Gather(DataParallel& data_parallel);
    ~GatheredScope();
    GatheredScope(const GatheredScope&) = delete;
    GatheredScope& operator=(const GatheredScope&) = delete;

   private:
    GatheredScope() = default;
    std::vector<FsdpParamGroup*> held_;
  };
  // Before each microbatch's backward: DDP communicates on the last one only.
  void BeginBackward(bool last_microbatch);
  // After the last backward of a step: FSDP's reduce-scatters still in flight are finished;
  // gradients are then averaged over data-parallel ranks (and partial ones summed over
  // tensor-parallel ranks).
  absl::Status FinishBackward();
  // [float8] precompute_float8_dynamic_scale_for_fsdp, after the optimizer step: the float8 scales
  // of every FSDP group's float8-gathered weights from one MAX all-reduce (instead of one per
  // group gather). A no-op without such weights.
  absl::Status PrecomputeFloat8Scales();
  // ComputeGradClip's reduction for `params` (this rank's, in the order ComputeGradClip gets them):
  // each
  // shard counted once, parameters replicated over tensor-parallel ranks once; null when every
  // rank holds whole gradients. Build it once: its per-parameter weights are copied to the device.
  SquaredNormReducer GradNormReducer(const std::vector<ParamRef>& params) const;

  // Checkpoint support. `local` holds parameters or optimizer state as this rank has them (a
  // sharded parameter's state named "<param>.<state>"). The whole tensor of one entry: shard-shaped
  // all-gathered, others as they are. A collective when sharded.
  absl::StatusOr<at::Tensor> GatherWhole(const std::string& name, const at::Tensor& tensor) const;
  // ShardedState: GatherWhole of each entry in turn, every rank's sink getting each.
  absl::Status GatherFull(const NamedTensors& local, const WholeTensorSink& sink) const override;
  // This rank's pieces for a distributed checkpoint: a shard-shaped entry becomes a view of its
  // rows without padding (loading into it fills the shard), its box in the whole tensor (FSDP rows
  // within a tensor-parallel slice) added to `boxes`; other entries as they are.
  NamedTensors CheckpointPieces(const NamedTensors& local, TensorBoxes& boxes) const override;
  // Whether this rank writes the piece `name` (the same piece held by several tensor-parallel
  // ranks is written by the first of them).
  bool WritesPiece(const std::string& name) const override;

 private:
  using ParamIndex = std::pair<const FsdpParamGroup*, const FsdpParamGroup::Param*>;
  // The sharded parameter `name` belongs to ("<param>" or "<param>.<state>"), when `tensor` has
  // its shard's shape; else null.
  const FsdpParamGroup::Param* ShardedParamOf(const std::string& name, const at::Tensor& tensor,
                                              const FsdpParamGroup** group) const;

  std::unique_ptr<DdpGradientReducer> ddp_;
  std::vector<std::unique_ptr<FsdpParamGroup>> groups_;
  // The groups' reduce-scatters overlap backward; FinishBackward drains it.
  std::unique_ptr<FsdpReduceScatterQueue> reduce_scatter_queue_;
  FsdpParamGroup* root_ = nullptr;
  bool reshard_root_ = false;
  FsdpParamGroup* first_in_backward_ = nullptr;
  Communicator* shard_ = nullptr;
  absl::flat_hash_map<std::string, ParamIndex> by_name_;
  std::unique_ptr<TensorParallel> tp_;
  std::unique_ptr<ContextParallel> cp_;
};

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_DATA_PARALLEL_H_
