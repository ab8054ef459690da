#ifndef TITAN_LIB_INTEROP_TORCH_STATE_DICT_H_
#define TITAN_LIB_INTEROP_TORCH_STATE_DICT_H_

// torch.save archives of a name -> tensor dict (Meta's consolidated.00.pth, transformers'
// pytorch_model*.bin), read through LibTorch's own unpickler (torch::jit) after
// CheckStateDictPickle: it rebuilds only tensors, storages and plain containers and rejects any
// other global, so a file cannot run code. A top-level collections.OrderedDict (what
// torch.save(model.state_dict()) writes) is read as the plain dict it holds (PlainDictPickle).
// Only PyTorch >= 1.6's zip format: the legacy one (a bare pickle or a tar) is refused, naming the
// file.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/checkpoint/safetensors.h"

namespace titan {

// torch.save's storage records: data/<key>.
inline constexpr char kTorchSaveStoragePrefix[] = "data/";

// The dict in a torch.save archive's bytes; the tensors own their memory. `source` (a path)
// prefixes errors. Corrupt input (bad zip, unknown pickle opcode, a global other than tensor
// rebuilding, a view past its storage) is an error, never a crash.
absl::StatusOr<NamedTensors> ParseTorchStateDict(absl::string_view archive,
                                                 const std::string& source);

// The same for the file at `path`, memory-mapped: a tensor stored as torch.save stores it
// (contiguous, in an uncompressed, aligned record) aliases the read-only mapping (never write to
// it), which stays mapped while any such tensor lives; others are copies.
absl::StatusOr<NamedTensors> ReadTorchStateDictFile(const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_TORCH_STATE_DICT_H_
