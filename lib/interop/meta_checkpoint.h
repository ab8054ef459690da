#ifndef TITAN_LIB_INTEROP_META_CHECKPOINT_H_
#define TITAN_LIB_INTEROP_META_CHECKPOINT_H_

// Meta's Llama 3 release format: params.json + consolidated.00.pth, a torch.save zip of a state
// dict whose names are torchtitan's (and whose q/k rows are in the same interleaved RoPE layout).
// Read through LibTorch's own unpickler (torch::jit), which rebuilds only tensors, storages and
// plain containers and rejects any other global, so a .pth cannot run code. It materialises every
// tensor on open: one copy of the model in memory. Only single-file (model-parallel 1) checkpoints.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/interop/llama3_hf.h"
#include "nlohmann/json.hpp"

namespace titan {

absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenMetaCheckpoint(const std::string& directory);

// Writes params.json and consolidated.00.pth through torch::jit::pickle_save (the whole archive in
// memory once). It wraps the dict in torch.jit._pickle.restore_type_tag, so Python's
// torch.load(weights_only=True) needs that global allowlisted (torch.serialization.safe_globals).
absl::Status WriteMetaCheckpoint(const std::string& directory, const NamedTensors& tensors,
                                 const Llama3ModelInfo& info);

// params.json: dim, n_layers, n_heads, n_kv_heads, vocab_size, multiple_of, ffn_dim_multiplier,
// norm_eps, rope_theta, use_scaled_rope.
nlohmann::json Llama3MetaParams(const Llama3ModelInfo& info);
// Llama 3.1 scaling (factor 8) when use_scaled_rope, unless the shapes match a flavor.
absl::StatusOr<Llama3ModelInfo> Llama3ModelInfoFromMetaParams(const nlohmann::json& params,
                                                              const std::string& source);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_META_CHECKPOINT_H_
