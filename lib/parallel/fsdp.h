#ifndef TITAN_LIB_PARALLEL_FSDP_H_
#define TITAN_LIB_PARALLEL_FSDP_H_

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/distributed/communicator.h"
#include "lib/float8/float8_linear.h"
#include "lib/model/module.h"

namespace titan {

// Per-parameter sharding as FSDP2: every parameter's dim 0 is padded to a multiple of the shard
// group's size and split evenly; this rank keeps its rows as a leaf tensor that replaces the
// full tensor in the model's slot, so the optimizer (and its state) sees only the shard.
//
// One group is the unit gathered together (a transformer block, or the model's remaining
// parameters): Unshard() all-gathers the group in one collective and puts full tensors into the
// slots; gradients flowing back to them are reduce-scattered (sum) into the shards' gradients,
// all-reduced over `replicate` for HSDP, and divided by the data-parallel size (Gloo has no AVG).
//
// Mixed precision (FSDP2's MixedPrecisionPolicy): shards, the optimizer and its state stay in the
// parameters' dtype; gathering casts to `param_dtype`, so the full tensors (and the forward and
// backward using them) run in it and the all-gather moves its bytes; gradients are cast to
// `reduce_dtype` before the reduce-scatter and land in the shards' dtype.
struct FsdpMixedPrecision {
  std::optional<at::ScalarType> param_dtype;   // unset: the parameters' dtype
  std::optional<at::ScalarType> reduce_dtype;  // unset: param_dtype
};

// Float8 all-gather (torchao's enable_fsdp_float8_all_gather, tensorwise): the named parameters
// (weights of float8 linears) travel as e4m3 bytes, a quarter of fp32's, half of bf16's. Each
// rank casts its shard with the scale of the whole tensor's absolute maximum (one MAX all-reduce
// per group gather), so the gathered bytes equal the float8 cast of the gathered weight; the
// linear uses them as its weight cast (RegisterFloat8Weight), in forward and backward, and the
// slot a stand-in of the weight's shape holding one element: no high-precision copy is made.
struct FsdpFloat8Params {
  absl::flat_hash_set<std::string> names;
  // Tensor parallelism: the shards are of TP slices, and the scale is the whole weight's (as the
  // float8 linear's own cast), so the maxima are MAX-reduced over these ranks too. Null: no TP.
  Communicator* tensor_parallel = nullptr;
};

class FsdpParamGroup;

// FSDP2's reduce-scatter overlap: each group's gradients are reduce-scattered without waiting, so
// the collective runs while backward computes the previous block; the group before is finished
// (waited, averaged, added to its shards' gradients) when the next one starts, and the last when
// the backward pass ends (an autograd final callback, as FSDP2's), so no group's full gradients
// outlive their microbatch's backward. At most one in flight, so at most one group's full
// gradients are held for it. Shared by the groups of one DataParallel.
class FsdpReduceScatterQueue {
 public:
  FsdpReduceScatterQueue();
  FsdpReduceScatterQueue(const FsdpReduceScatterQueue&) = delete;
  FsdpReduceScatterQueue& operator=(const FsdpReduceScatterQueue&) = delete;
  ~FsdpReduceScatterQueue();

  // Finishes what is in flight, then starts `group`'s reduce-scatter of `full_grads`; inside a
  // backward pass, the queue is drained when it ends.
  void Issue(const FsdpParamGroup& group, const std::vector<at::Tensor>& full_grads);
  // Finishes what is in flight; a failed collective is returned.
  absl::Status Drain();

 private:
  struct InFlight;
  // Finishes `done` and adds its gradients to its group's shards.
  static absl::Status Finish(std::unique_ptr<InFlight> done);
  std::unique_ptr<InFlight> in_flight_;     // a reduce-scatter
  std::unique_ptr<InFlight> all_reducing_;  // HSDP: the one before, all-reducing over replicas
  int drain_queued_for_ = -1;               // the autograd graph task whose end drains the queue
};

class FsdpParamGroup {
 public:
  // `params`' slots hold full, initialised tensors, identical on every rank of `shard`; each is
  // replaced by this rank's shard. `replicate` is null unless HSDP. Both must outlive the group.
  static absl::StatusOr<std::unique_ptr<FsdpParamGroup>> Create(
      const std::vector<ParamRef>& params, Communicator* shard, Communicator* replicate,
      const FsdpMixedPrecision& mixed_precision = {}, const FsdpFloat8Params& float8 = {});

  // Puts full tensors into the slots: all-gathered from the shards, connected to them by autograd
  // when grad mode is on. Throws c10::Error when the collective fails (it runs inside autograd).
  // Returns the float8 casts' bytes the float8 linears take as their weights (indexed like the
  // parameters; undefined for the others).
  std::vector<at::Tensor> Unshard();
  // Puts the shards back; the full tensors live on only where autograd saved them.
  void Reshard();
  // Unshard, call(x), Reshard. With `reshard_after_forward` (and grad mode on), the full tensors
  // autograd saved also give up their memory, and are all-gathered into it again when the gradient
  // reaches call's output in backward (FSDP2's storage resize): no recomputation. That memory goes
  // again when this call's gather node runs, after every gradient of the full tensors.
  // `prefetch` (if set) starts gathering right after this group's gather, so that it overlaps
  // call's compute; `backward_prefetch` (if set) right after the gather again in backward, so that
  // the group backward needs next arrives while this one's gradients are computed.
  at::Tensor CallUnsharded(const std::function<at::Tensor(const at::Tensor&)>& call,
                           const at::Tensor& x, bool reshard_after_forward = false,
                           FsdpParamGroup* prefetch = nullptr,
                           FsdpParamGroup* backward_prefetch = nullptr);
  // Starts this group's all-gather without waiting (FSDP2's forward prefetch): the next Unshard
  // uses it. Every member of the group must prefetch at the same point.
  void Prefetch();
  // Waits for and discards a prefetch no Unshard used (e.g. a forward that stopped early).
  void DropPrefetch();
  // Gathers the full parameters once and keeps them in the slots, without autograd, until
  // Release(): CallUnsharded and Prefetch communicate nothing meanwhile (generation's token
  // loop). Every member calls both at the same point. Throws c10::Error as Unshard does.
  void Hold();
  void Release();

  struct Param {
    std::string name;
    at::Tensor* slot;
    std::vector<int64_t> full_shape;
    int64_t rows_per_shard;  // dim 0 of the shard, padding included
    int64_t row_numel;       // elements per dim-0 row
    int64_t offset;          // of this parameter in the group's flat shard buffer
    at::Tensor shard;        // [rows_per_shard, full_shape[1:]...], padding rows zero
    bool float8 = false;     // gathered as float8 (FsdpFloat8Params)
    int64_t gather_offset;   // in the all-gather's buffer (float8 bytes pack several per element)
  };
  const std::vector<Param>& params() const { return params_; }

  // The full tensor of a shard-shaped tensor of `param` (a shard, or optimizer state alike),
  // all-gathered over the shard group; every member must call it in the same order.
  absl::StatusOr<at::Tensor> GatherFull(const Param& param, const at::Tensor& shard_like) const;
  // This rank's rows of a full-shaped tensor of `param`, zero-padded to the shard's shape.
  at::Tensor ShardOf(const Param& param, const at::Tensor& full) const;
  // The full tensor's rows this rank holds: [FirstRowHeld, FirstRowHeld + RowsHeld), padding not
  // counted (the last ranks may hold fewer rows, or none).
  int64_t FirstRowHeld(const Param& param) const;
  int64_t RowsHeld(const Param& param) const;

  // precompute_float8_dynamic_scale_for_fsdp: this rank's shards' absolute maxima of the float8
  // parameters (in order; none without), and, from their maxima over the shard group, the scales
  // gathers use until a shard changes (its version counter moves), instead of reducing them.
  std::vector<at::Tensor> Float8ShardAmaxes() const;
  void SetFloat8Scales(const std::vector<at::Tensor>& global_amaxes);
  // Shard maxima (in place) to the whole weights' maxima: MAX over the shard group, then over the
  // tensor-parallel group when the weights are TP slices.
  absl::Status AllReduceFloat8Amaxes(const at::Tensor& amaxes) const;

  // The autograd all-gather (forward) and reduce-scatter (backward); used by Unshard. Float8
  // parameters' casts go to `float8_casts` (indexed like params(), unset for the others), and
  // their full tensors are one-element stand-ins for the casts.
  std::vector<at::Tensor> AllGatherFlat(
      const std::vector<at::Tensor>& shards,
      std::vector<std::optional<Float8Tensor>>* float8_casts) const;
  std::vector<at::Tensor> ReduceScatterGrads(const std::vector<at::Tensor>& full_grads) const;
  // Set: backward hands the gradients to `queue` (overlapped) instead of reducing them in place.
  void set_reduce_scatter_queue(FsdpReduceScatterQueue* queue) { queue_ = queue; }
  FsdpReduceScatterQueue* reduce_scatter_queue() const { return queue_; }

  // The halves of ReduceScatterGrads: the input built and the collective started; under HSDP,
  // optionally, the reduce-scatter awaited and the all-reduce over `replicate` started; then
  // everything awaited, averaged and cut into shard gradients.
  struct PendingReduceScatter {
    std::unique_ptr<Work> work;  // the reduce-scatter, or once started the all-reduce
    at::Tensor input;    // kept until waited for (on CUDA, the stream order then protects it)
    at::Tensor reduced;  // this rank's rows, flat
    bool all_reducing = false;
  };
  PendingReduceScatter StartReduceScatter(const std::vector<at::Tensor>& full_grads) const;
  // Whether the group all-reduces over replicas (HSDP) after its reduce-scatter.
  bool replicated() const { return replicate_ != nullptr && replicate_->size() > 1; }
  void StartReplicaAllReduce(PendingReduceScatter& pending) const;
  std::vector<at::Tensor> FinishReduceScatter(PendingReduceScatter pending) const;
  // Adds `grads` (shard-shaped, from FinishReduceScatter) to the shards' gradients.
  void AccumulateShardGrads(const std::vector<at::Tensor>& grads) const;

 private:
  FsdpParamGroup(std::vector<Param> params, int64_t shard_numel, int64_t gather_numel,
                 Communicator* shard, Communicator* replicate, Communicator* float8_tensor_parallel,
                 at::ScalarType param_dtype, at::ScalarType reduce_dtype)
      : params_(std::move(params)),
        shard_numel_(shard_numel),
        gather_numel_(gather_numel),
        shard_(shard),
        replicate_(replicate),
        float8_tensor_parallel_(float8_tensor_parallel),
        param_dtype_(param_dtype),
        reduce_dtype_(reduce_dtype) {}

  // Gathers the shards again into the storage of `full` and of `float8_data` (tensors Unshard
  // made, then freed; the latter the float8 casts' bytes, undefined for other parameters), and
  // adds the storages it filled to `refilled`.
  void RefillFull(const std::vector<at::Tensor>& full, const std::vector<at::Tensor>& float8_data,
                  std::vector<c10::Storage>* refilled) const;
  // Every parameter's shard, in order.
  std::vector<at::Tensor> Shards() const;
  // What the all-gather sends: the shards flat, cast to param_dtype_, float8 parameters' as
  // their bytes, with the float8 scales (indexed like params_).
  struct FlatBuffer {
    at::Tensor flat;
    std::vector<at::Tensor> float8_scales;
  };
  FlatBuffer FlatShards(const std::vector<at::Tensor>& shards) const;
  // The float8 parameters' scales (indexed like params_) from their whole tensors' maxima, in
  // Float8ShardAmaxes' order.
  std::vector<at::Tensor> Float8ScalesOf(const std::vector<at::Tensor>& global_amaxes) const;
  // The full tensors from `gathered` [group size, gather_numel_].
  std::vector<at::Tensor> AssembleAll(const at::Tensor& gathered,
                                      const std::vector<at::Tensor>& float8_scales,
                                      std::vector<std::optional<Float8Tensor>>* float8_casts) const;

  struct PendingGather {
    std::unique_ptr<Work> work;
    FlatBuffer sent;      // kept until waited for (on CUDA, the stream order then protects it)
    at::Tensor gathered;  // [group size, gather_numel_]
  };

  std::vector<Param> params_;
  int64_t shard_numel_;   // sum of the shards' element counts
  int64_t gather_numel_;  // the all-gather buffer's elements per rank (float8 shards packed)
  // SetFloat8Scales' scales and the shard versions they are valid for (indexed like params_).
  std::vector<at::Tensor> float8_scales_;
  std::vector<int64_t> float8_scale_versions_;
  Communicator* shard_;
  Communicator* replicate_;
  Communicator* float8_tensor_parallel_;  // FsdpFloat8Params::tensor_parallel
  at::ScalarType param_dtype_;
  at::ScalarType reduce_dtype_;
  mutable std::optional<PendingGather> prefetched_;  // Taken by the next AllGatherFlat.
  bool held_ = false;                                // Hold() to Release()
  FsdpReduceScatterQueue* queue_ = nullptr;
};

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_FSDP_H_
