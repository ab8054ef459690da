#ifndef TITAN_LIB_CHECKPOINT_SAFETENSORS_H_
#define TITAN_LIB_CHECKPOINT_SAFETENSORS_H_

// The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON (padded with spaces), then the tensors' bytes back to back.

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/util/mapped_file.h"

namespace titan {

// Tensors in the order a caller means them (model parameters, optimizer state ...).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// The reference rejects headers longer than this; so do we, before parsing any JSON.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// "[2, 3]": a shape as error messages spell it.
std::string ShapeString(const std::vector<int64_t>& shape);

// "F32", "BF16", ... for the dtypes safetensors and LibTorch share; an error for others.
absl::StatusOr<std::string> SafetensorsDtypeName(at::ScalarType type);
absl::StatusOr<at::ScalarType> ScalarTypeFromSafetensorsDtype(absl::string_view dtype);

// One tensor's entry in a header.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // As written in the header, e.g. "BF16".
  at::ScalarType scalar_type = at::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // Byte range [begin, end) relative to the start of the data section.
  uint64_t end = 0;
};

// A parsed, validated header.
struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // In data order.
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // File offset of the data section: 8 + header length.
};

// Parses and strictly validates the header of a whole file's bytes: length field within bounds and
// the file, JSON object, known dtypes, non-negative shapes, offsets that tile the data section
// exactly. `source` (a path) prefixes every error. Never crashes on malformed input.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view file_bytes,
                                                         absl::string_view source);

// Called by WriteSafetensors with each tensor's bytes as they are written (e.g. to checksum them);
// an error stops the write, leaving no file, and is returned.
using TensorBytesObserver =
    std::function<absl::Status(const std::string& name, absl::string_view bytes)>;

// Writes `tensors` to `path` atomically (temp file, fsync, rename, fsync of the directory). Tensors
// are laid out like the reference writer (by dtype alignment, then name), so the file is
// byte-identical to `safetensors.torch.save_file` for the same tensors and at most one metadata key
// (the reference orders several keys by hash). Tensors stream to disk one at a time; a tensor that
// is not a contiguous CPU tensor is copied to one just before it is written. Empty `metadata`
// writes no
// "__metadata__" entry.
absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata = {},
                              const TensorBytesObserver& observer = nullptr);

// A tensor over little-endian `bytes` (e.g. inside a mapping): aliasing them when their address
// suits the dtype (read-only: never write to it; valid while the bytes are), else an owned copy.
at::Tensor TensorOverBytes(absl::string_view bytes, at::ScalarType type,
                           const std::vector<int64_t>& shape);

// A memory-mapped safetensors file with a validated header; tensors load one at a time.
class SafetensorsFile {
 public:
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  SafetensorsFile(SafetensorsFile&&);
  SafetensorsFile& operator=(SafetensorsFile&&);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  std::vector<std::string> names() const;

  // nullptr when the file has no tensor called `name`.
  const SafetensorsEntry* Find(absl::string_view name) const;

  // The tensor's raw little-endian bytes inside the mapping (valid while this object lives).
  absl::StatusOr<absl::string_view> Bytes(absl::string_view name) const;

  // An owned, contiguous CPU copy of the tensor.
  absl::StatusOr<at::Tensor> Load(absl::string_view name) const;

  // Copies the tensor into `destination` in place (any device or dtype, as Tensor::copy_ converts);
  // the shapes must match.
  absl::Status LoadInto(absl::string_view name, const at::Tensor& destination) const;

 private:
  SafetensorsFile(std::string path, std::shared_ptr<const MappedFile> mapping,
                  SafetensorsHeader header);

  std::string path_;
  std::shared_ptr<const MappedFile> mapping_;
  SafetensorsHeader header_;
  absl::flat_hash_map<std::string, size_t> index_;  // name -> position in header_.entries
};

}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_SAFETENSORS_H_
