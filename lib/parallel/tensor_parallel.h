#ifndef TITAN_LIB_PARALLEL_TENSOR_PARALLEL_H_
#define TITAN_LIB_PARALLEL_TENSOR_PARALLEL_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/distributed/communicator.h"
#include "lib/model/decoder.h"
#include "lib/model/module.h"
#include "lib/model/transformer_args.h"

namespace titan {

struct TensorParallelOptions {
  // [parallelism] enable_sequence_parallel: norms and residuals run on a slice of the sequence
  // (all-gathered into attention and the feed-forward, reduce-scattered out of them).
  bool sequence_parallel = true;
  // Not [parallelism] disable_loss_parallel: the logits stay vocabulary shards (the loss must be
  // VocabParallelCrossEntropySum); else they are all-gathered.
  bool loss_parallel = true;
};

// Where a parameter's shard sits in the whole tensor.
struct TensorParallelShard {
  int64_t dim;                        // the split dimension
  std::vector<int64_t> global_shape;  // of the whole tensor
  int64_t offset;                     // of this rank's slice along `dim`
};

// torchtitan's tensor-parallel plan for the dense decoder, Megatron style, over the tensor-parallel
// group: wq/wk/wv, w1/w3 and the output head are split by rows (column-parallel, dim 0), wo and w2
// by columns (row-parallel, dim 1), the embedding by vocabulary rows; norms are replicated. Apply
// sets the decoder's region hooks (f/g, or all-gather / reduce-scatter along the sequence with
// sequence parallelism) and its vocab-parallel embedding lookup; ShardParameters then replaces
// whole parameters by this rank's slices (all ranks must hold the same whole values).
class TensorParallel {
 public:
  // One line naming the degree when heads, KV heads, the FFN width or the vocabulary do not divide
  // by it.
  static absl::Status CheckDivisible(const TransformerArgs& args, int degree);
  // The dimension the plan splits parameter `name` along (0: column-parallel or vocabulary rows,
  // 1: row-parallel); none: replicated.
  static std::optional<int64_t> SplitDimOf(const std::string& name);
  // `tp` must outlive the model.
  static absl::StatusOr<std::unique_ptr<TensorParallel>> Apply(Decoder& model,
                                                               const TensorParallelOptions& options,
                                                               Communicator* tp);

  // Puts this rank's slice into the slot of every parameter of `params` the plan splits (those
  // slots must hold whole, materialised tensors).
  void ShardParameters(const std::vector<ParamRef>& params);

  Communicator* group() const { return tp_; }
  bool loss_parallel() const { return options_.loss_parallel; }
  // The shard `name` ("<param>" or "<param>.<state>" of optimizer state) is, when `shape` is that
  // shard's; else null (replicated, or a scalar).
  const TensorParallelShard* ShardOf(const std::string& name, at::IntArrayRef shape) const;
  // The whole tensor from every rank's `local` (a collective over the group in every case, so call
  // it on every rank for the same names).
  absl::StatusOr<at::Tensor> GatherFull(const TensorParallelShard& shard,
                                        const at::Tensor& local) const;
  // Sums over the group the gradients of replicated parameters that hold per-rank partial sums
  // (norms seeing a sequence slice under sequence parallelism, qk-norms seeing a head slice), in
  // whatever their slots hold by then (FSDP shards too).
  absl::Status ReduceReplicatedGradients() const;
  // Whether this rank counts `name`'s gradient and saves its checkpoint pieces: always for split
  // parameters, only on the group's rank 0 for replicated ones (the others hold the same).
  bool OwnsCopy(const std::string& name) const;

 private:
  TensorParallel(const TensorParallelOptions& options, Communicator* tp)
      : options_(options), tp_(tp) {}
  void InstallHooks(Decoder& model) const;

  TensorParallelOptions options_;
  Communicator* tp_;
  absl::flat_hash_map<std::string, TensorParallelShard> shards_;
  std::vector<ParamRef> partial_;  // replicated, with per-rank partial gradients
};

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_TENSOR_PARALLEL_H_
