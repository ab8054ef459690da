#ifndef TITAN_LIB_INTEROP_META_CHECKPOINT_H_
#define TITAN_LIB_INTEROP_META_CHECKPOINT_H_

// Meta's release format (Llama 3): params.json + consolidated.00.pth, a torch.save zip of a state
// dict whose names are torchtitan's (and whose q/k rows are in the same interleaved RoPE layout).
// What params.json says is the family's business (ModelSpec::meta).
// Read by ReadTorchStateDictFile (lib/interop/torch_state_dict.h: LibTorch's restricted unpickler,
// so a .pth cannot run code), memory-mapped. Only single-file (model-parallel 1) checkpoints.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/checkpoint_reader.h"
#include "nlohmann/json.hpp"

namespace titan {

// keep_damaged (checkpoint_inspect): a consolidated.00.pth that is missing or cannot be read is
// listed in Damaged() and Verify(), the reader holding no tensors, rather than failing the open.
absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenMetaCheckpoint(const std::string& directory,
                                                                     bool keep_damaged = false);

// Writes `params` as params.json and consolidated.00.pth, a torch.save archive that Python's
// torch.load(weights_only=True) reads without allowlisting anything. Tensors are produced and
// written one at a time (`produce(i)` gives the tensor called names[i]), so at most one is in
// memory; the file appears atomically (temp file, fsync, rename).
using MetaTensorProducer = std::function<absl::StatusOr<at::Tensor>(size_t index)>;
absl::Status WriteMetaCheckpoint(const std::string& directory,
                                 const std::vector<std::string>& names,
                                 const MetaTensorProducer& produce, const nlohmann::json& params);
// The same for tensors already in memory.
absl::Status WriteMetaCheckpoint(const std::string& directory, const NamedTensors& tensors,
                                 const nlohmann::json& params);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_META_CHECKPOINT_H_
