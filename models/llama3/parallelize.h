#ifndef TITAN_MODELS_LLAMA3_PARALLELIZE_H_
#define TITAN_MODELS_LLAMA3_PARALLELIZE_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/distributed/mesh_communicators.h"
#include "lib/distributed/parallel_dims.h"
#include "lib/parallel/data_parallel.h"
#include "models/llama3/model.h"

namespace titan {

// torchtitan's [activation_checkpoint]: mode "none", "full" (every block), or "selective" with
// selective_ac_option = N (every Nth block: N-1, 2N-1, ... as torchtitan). Op-level selective AC
// ("op") needs per-op policies LibTorch's C++ autograd does not expose; it is rejected with that
// reason.
absl::Status ApplyActivationCheckpointing(Llama3Model& model, const std::string& mode,
                                          const std::string& selective_ac_option);

struct ParallelizeOptions {
  std::string ac_mode = "none";
  std::string selective_ac_option = "2";
  // [parallelism] fsdp_reshard_after_forward: "default" (every block but the last), "always",
  // "never".
  std::string reshard_after_forward = "default";
  // FSDP's mixed-precision policy (see lib/parallel/fsdp.h); unset: the parameters' dtype.
  FsdpMixedPrecision fsdp_mixed_precision;
  // Set when the model's parameters are still on the meta device: FSDP materialises them here
  // (device, dtype) and initialises one group at a time, keeping only its shards, so no rank ever
  // holds more than the embedding, output and one block in full. Other styles need an
  // initialised model.
  std::optional<at::TensorOptions> materialize;
};

// torchtitan's parallelize_llama for data parallelism, on a materialised, initialised model
// (identical on every rank): activation checkpointing, then
//  - FSDP (dims shard, HSDP when they also replicate): every parameter is replaced by its shard;
//    each block is one group gathered around its call, the embedding, final norm and output one
//    group gathered around the whole forward (DataParallel::Forward). A block that reshards after
//    forward frees its gathered parameters' memory and all-gathers them again when backward reaches
//    it (FSDP2's behaviour); a checkpointed block recomputes, gathering again as it does;
//  - DDP (dims replicate only): bucketed gradient all-reduce during backward.
// `comms` may be null when dims.dp() == 1. The model must outlive the result.
absl::StatusOr<std::unique_ptr<DataParallel>> ParallelizeLlama3(Llama3Model& model,
                                                                const ParallelizeOptions& options,
                                                                const ParallelDims& dims,
                                                                const MeshCommunicators* comms);

}  // namespace titan

#endif  // TITAN_MODELS_LLAMA3_PARALLELIZE_H_
