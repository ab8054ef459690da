#ifndef TITAN_LIB_INTEROP_CHECKPOINT_READER_H_
#define TITAN_LIB_INTEROP_CHECKPOINT_READER_H_

// Read access to model checkpoints in the formats titan exchanges:
//   titan: <root>/step-N/{model.safetensors, manifest.json[, optimizer.safetensors]} (a step
//          directory, or the root, meaning its latest step); only model tensors are read.
//   hf:    Hugging Face: config.json + model.safetensors, or model-0000i-of-0000n.safetensors
//          shards listed in model.safetensors.index.json; without safetensors, as transformers
//          reads them, PyTorch's pytorch_model.bin or shards listed in pytorch_model.bin.index.json
//          (torch.save archives, read by lib/interop/torch_state_dict.h: no code runs).
//   meta:  params.json + consolidated.00.pth (lib/interop/meta_checkpoint.h).
// Tensor metadata is known up front; tensor data is read one tensor at a time from memory-mapped
// files, so a reader never holds the model in memory (but for a torch.save tensor stored as a
// non-contiguous view, copied on open).

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace titan {

enum class CheckpointFormat { kTitan, kHf, kMeta };

// "titan", "hf", "meta".
std::string CheckpointFormatName(CheckpointFormat format);
absl::StatusOr<CheckpointFormat> ParseCheckpointFormat(absl::string_view name);
// From the files present: manifest.json or step-N/ (titan), config.json (hf), params.json (meta).
// config.json beside Meta's params.json and consolidated.00.pth is hf, or meta where `hf_of_both`
// is false (a caller told the checkpoint is not HF), with a warning (once a process) naming the one
// read and ending in `read_other_hint`, how the caller's user reads the other one instead (empty:
// a hint for any tool).
absl::StatusOr<CheckpointFormat> DetectCheckpointFormat(const std::string& path,
                                                        absl::string_view read_other_hint = "",
                                                        bool hf_of_both = true);

struct TensorInfo {
  std::string name;
  std::string dtype;  // safetensors' spelling: "F32", "BF16", ...
  at::ScalarType scalar_type = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  std::string file;  // The file holding it, relative to directory(); "" when several pieces do.
  // titan, saved over ranks: the file of each piece that holds part of it, when there are several.
  std::vector<std::string> piece_files;
};

// A Hugging Face folder's config.json, parsed; the folder need not hold weights.
absl::StatusOr<nlohmann::json> ReadHfConfig(const std::string& directory);
// Its generation_config.json, parsed; null when absent or not a JSON object (with a warning:
// transformers too loads the model without it then).
nlohmann::json ReadHfGenerationConfig(const std::string& directory);
// Whether a Hugging Face folder holds weights transformers reads (model.safetensors, its sharded
// index, pytorch_model.bin or its sharded index).
bool HfFolderHoldsWeights(const std::string& directory);

class CheckpointReader {
 public:
  // `format` unset: detected from the files. verify_checksums (titan): Get checks each piece
  // against the manifest's CRC-32 the first time it is read, failing with DataLoss naming the file
  // and tensor; off only where a report lists the problems (checkpoint_inspect --verify).
  // A titan step is opened by its model files only (a damaged optimizer file does not stop a model
  // export), unless `inspect`: then every file is opened and a damaged one (truncated, missing) is
  // listed in Damaged() rather than failing Open (checkpoint_inspect). An HF folder opened to
  // inspect without verify_checksums (checkpoint_inspect --verify) lists its damage the same way:
  // a weights file (safetensors, or .bin) that cannot be read in Damaged(), and where the index
  // disagrees with the files (a tensor in another shard, in none or in two, one the index lacks) in
  // Verify(). A Meta checkpoint opened to inspect lists a consolidated.00.pth it cannot read in
  // Damaged().
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(
      const std::string& path, std::optional<CheckpointFormat> format = std::nullopt,
      bool verify_checksums = true, bool inspect = false);

  virtual ~CheckpointReader() = default;

  CheckpointFormat format() const { return format_; }
  // The directory read: the step directory for titan.
  const std::string& directory() const { return directory_; }
  // titan: the step; unset otherwise.
  std::optional<int64_t> step() const { return step_; }
  // The model description as stored: hf config.json, titan manifest "state", meta params.json.
  const nlohmann::json& description() const { return description_; }
  // Every tensor, in file order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* Find(absl::string_view name) const;

  // The tensor, aliasing the mapped file when its bytes are aligned for its dtype (read-only: never
  // write to it), else a copy. Valid while the reader lives.
  virtual absl::StatusOr<at::Tensor> Get(absl::string_view name) const = 0;
  // Its raw little-endian bytes inside the mapping.
  virtual absl::StatusOr<absl::string_view> Bytes(absl::string_view name) const = 0;

  // Format-specific integrity checks beyond what Open validates (titan: every tensor's size and
  // CRC-32 against the manifest; hf: the index's metadata.total_size), after the damage Open
  // listed when opened to inspect. Each problem is one line naming the file and tensor.
  virtual std::vector<std::string> Verify() const = 0;
  // Files Open found damaged (opened to inspect: above), one line each naming the file; a titan
  // step's tensors in them are listed but cannot be read, an HF folder's are not listed.
  virtual std::vector<std::string> Damaged() const { return {}; }

 protected:
  CheckpointFormat format_ = CheckpointFormat::kTitan;
  std::string directory_;
  std::optional<int64_t> step_;
  nlohmann::json description_ = nlohmann::json::object();
  std::vector<TensorInfo> tensors_;
};

// model.safetensors.index.json or pytorch_model.bin.index.json: which shard file holds each tensor
// (a path relative to the index's folder, perhaps in a subfolder; one leaving the folder is
// refused), and metadata.total_size when present. `source` (the path) prefixes errors.
struct HfIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file path
  std::optional<uint64_t> total_size;
};
absl::StatusOr<HfIndex> ParseHfIndex(absl::string_view text, const std::string& source);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_CHECKPOINT_READER_H_
