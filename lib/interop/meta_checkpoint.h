#ifndef TITAN_LIB_INTEROP_META_CHECKPOINT_H_
#define TITAN_LIB_INTEROP_META_CHECKPOINT_H_

// Meta's Llama 3 release format: params.json + consolidated.00.pth, a torch.save zip of a state
// dict whose names are torchtitan's (and whose q/k rows are in the same interleaved RoPE layout).
// Read through LibTorch's own unpickler (torch::jit), which rebuilds only tensors, storages and
// plain containers and rejects any other global, so a .pth cannot run code. It materialises every
// tensor on open: one copy of the model in memory. Only single-file (model-parallel 1) checkpoints.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/interop/llama3_hf.h"
#include "nlohmann/json.hpp"

namespace titan {

absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenMetaCheckpoint(const std::string& directory);

// The name -> tensor dict in a torch.save archive's bytes (consolidated.00.pth), as
// OpenMetaCheckpoint reads it; the tensors own their memory. `source` (a path) prefixes errors.
// Corrupt input (bad zip, unknown pickle opcode, a global other than tensor rebuilding) is an
// error, never a crash.
absl::StatusOr<NamedTensors> ParseTorchStateDict(absl::string_view archive,
                                                 const std::string& source);

// Writes params.json and consolidated.00.pth, a torch.save archive that Python's
// torch.load(weights_only=True) reads without allowlisting anything. Tensors are produced and
// written one at a time (`produce(i)` gives the tensor called names[i]), so at most one is in
// memory; the file appears atomically (temp file, fsync, rename).
using MetaTensorProducer = std::function<absl::StatusOr<at::Tensor>(size_t index)>;
absl::Status WriteMetaCheckpoint(const std::string& directory,
                                 const std::vector<std::string>& names,
                                 const MetaTensorProducer& produce, const Llama3ModelInfo& info);
// The same for tensors already in memory.
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
