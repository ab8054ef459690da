#ifndef TITAN_LIB_PARALLEL_PARALLELIZE_H_
#define TITAN_LIB_PARALLEL_PARALLELIZE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/distributed/mesh_communicators.h"
#include "lib/distributed/parallel_dims.h"
#include "lib/model/decoder.h"
#include "lib/parallel/data_parallel.h"
#include "lib/parallel/tensor_parallel.h"

namespace titan {

// torchtitan's [activation_checkpoint]: mode "none", "full" (every block), or "selective" with
// selective_ac_option = N (every Nth block: N-1, 2N-1, ... as torchtitan) or "op" (every block,
// keeping the outputs of attention and of every second linear and recomputing the cheap ops
// between them: torchtitan's per-op policy, see RecomputePolicy).
absl::Status ApplyActivationCheckpointing(Decoder& model, const std::string& mode,
                                          const std::string& selective_ac_option);

struct ParallelizeOptions {
  std::string ac_mode = "none";
  std::string selective_ac_option = "2";
  // [parallelism] fsdp_reshard_after_forward, as torchtitan: "default" (every block, unless
  // pipeline parallel), "always" (the embedding, norm and output group too), "never".
  std::string reshard_after_forward = "default";
  // With a tensor-parallel degree above 1: [parallelism] enable_sequence_parallel and
  // disable_loss_parallel.
  TensorParallelOptions tensor_parallel;
  // With a context-parallel degree above 1: [parallelism] context_parallel_load_balancer and
  // context_parallel_rotate_method.
  std::string cp_load_balancer = "headtail";
  std::string cp_rotate_method = "allgather";
  // FSDP's mixed-precision policy (see lib/parallel/fsdp.h); unset: the parameters' dtype.
  FsdpMixedPrecision fsdp_mixed_precision;
  // [float8] enable_fsdp_float8_all_gather: FSDP gathers the weights of the linears a converter
  // set (float8, tensorwise) as float8 (FsdpFloat8Params).
  bool fsdp_float8_all_gather = false;
  // Set when the model's parameters are still on the meta device: FSDP materialises them here
  // (device, dtype) and initialises one group at a time, keeping only its shards, so no rank ever
  // holds more than the embedding, output and one block in full. Other styles need an
  // initialised model.
  std::optional<at::TensorOptions> materialize;
};

// torchtitan's parallelize_llama / parallelize_qwen3, on a materialised, initialised model
// (identical on every rank), or on the meta device with options.materialize (FSDP):
//  - tensor parallelism (dims tp): the plan's parameters are replaced by this rank's slices and the
//    decoder's region hooks set (lib/parallel/tensor_parallel.h);
//  - context parallelism (dims cp): ring attention (lib/parallel/context_parallel.h); the trainer
//    shards each batch with DataParallel::ShardBatch;
//  - activation checkpointing, then
//  - FSDP over dp_shard × cp (HSDP when dims also replicate): every parameter is replaced by its
//    shard (of its tensor-parallel slice); each block is one group gathered around its call, the
//    embedding, final norm and output one group gathered around the whole forward
//    (DataParallel::Forward). A block that reshards after forward frees its gathered parameters'
//    memory and all-gathers them again when backward reaches it (FSDP2's behaviour), and then
//    starts the all-gather of the block backward needs next; a checkpointed block recomputes,
//    gathering again as it does;
//  - DDP (dims replicate only): bucketed gradient all-reduce during backward.
// `comms` may be null for one process. The model must outlive the result.
absl::StatusOr<std::unique_ptr<DataParallel>> ParallelizeDecoder(Decoder& model,
                                                                 const ParallelizeOptions& options,
                                                                 const ParallelDims& dims,
                                                                 const MeshCommunicators* comms);

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_PARALLELIZE_H_
