#ifndef TITAN_LIB_CHECKPOINT_CHECKPOINT_MANIFEST_H_
#define TITAN_LIB_CHECKPOINT_CHECKPOINT_MANIFEST_H_

// The pieces a checkpoint step's manifest (and each rank's record) lists: how an entry is written,
// parsed and checked, shared by CheckpointManager (saving) and CheckpointStep (reading).

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace titan {

// Where a piece of a larger tensor sits: the whole tensor's shape and the piece's offset per dim.
struct TensorBox {
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
};
// Names of pieces -> their boxes; a name without a box is a whole tensor.
using TensorBoxes = std::map<std::string, TensorBox>;

// One saved piece of a tensor (CheckpointStep::Piece).
struct CheckpointPiece {
  std::string file;  // Base name in the step directory.
  std::vector<int64_t> shape;
  std::vector<int64_t> offsets;  // In the whole tensor.
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

// One saved tensor and the pieces that hold it (CheckpointStep::Tensor).
struct CheckpointTensor {
  std::string name;
  std::string dtype;  // safetensors' spelling, e.g. "F32".
  at::ScalarType scalar_type = at::kFloat;
  std::vector<int64_t> shape;           // Of the whole tensor.
  std::vector<CheckpointPiece> pieces;  // Tile the whole tensor exactly.
};

namespace checkpoint_internal {

// Stems of the files a step's tensors are saved in.
inline constexpr char kModelStem[] = "model";
inline constexpr char kOptimizerStem[] = "optimizer";

// CRC-32 rather than SHA-256: it guards against torn writes and bit rot, not tampering, zlib is
// already a dependency, and it keeps pace with the disk on multi-GB checkpoints.
uint32_t Crc32(absl::string_view bytes);

// The file rank `rank` of `world` writes its `stem` ("model" or "optimizer") tensors to.
std::string RankFileName(absl::string_view stem, int rank, int world);

// The number of elements in a tensor of `shape`.
int64_t Volume(const std::vector<int64_t>& shape);

// True when the boxes [a, a + a_shape) and [b, b + b_shape) share an element.
bool BoxesOverlap(const std::vector<int64_t>& a, const std::vector<int64_t>& a_shape,
                  const std::vector<int64_t>& b, const std::vector<int64_t>& b_shape);

// One manifest (or rank record) entry: a whole tensor, or a piece of one.
struct PieceEntry {
  std::string stem;  // "model" or "optimizer", from the file name.
  std::string name;
  std::string dtype;
  CheckpointPiece piece;
  std::vector<int64_t> global_shape;
};

// The entry for `tensor`, saved in `file` with checksum `crc32`; `box` (if not null) places it.
nlohmann::json PieceEntryToJson(const std::string& file, const std::string& name,
                                const at::Tensor& tensor, uint32_t crc32, const TensorBox* box);

// The manifest's pieces, with the fields and types they need.
absl::StatusOr<std::vector<PieceEntry>> ParsePieceEntries(const std::string& source,
                                                          const nlohmann::json& tensors);

// Groups pieces into tensors (in order of first appearance) and checks that each tensor's pieces
// agree on dtype and shape and tile it exactly.
absl::Status GroupPieces(const std::string& source, std::vector<PieceEntry> entries,
                         std::vector<CheckpointTensor>& model,
                         std::vector<CheckpointTensor>& optimizer);

}  // namespace checkpoint_internal
}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_CHECKPOINT_MANIFEST_H_
