#include "lib/checkpoint/checkpoint_manifest.h"

#include <stdio.h>
#include <zlib.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace checkpoint_internal {

using nlohmann::json;

namespace {

// The stem of a file name RankFileName can produce; nullopt for any other name.
std::optional<std::string> StemOfRankFile(absl::string_view file) {
  for (absl::string_view stem : {kModelStem, kOptimizerStem}) {
    absl::string_view rest = file;
    if (!absl::ConsumePrefix(&rest, stem) || !absl::ConsumeSuffix(&rest, ".safetensors")) continue;
    if (rest.empty()) return std::string(stem);
    int rank, world;
    char tail;
    if (std::sscanf(std::string(rest).c_str(), "-%5d-of-%5d%c", &rank, &world, &tail) == 2 &&
        RankFileName(stem, rank, world) == file) {
      return std::string(stem);
    }
  }
  return std::nullopt;
}

// tensors[index] of `source`, checked to name a rank's file and to fit in its whole tensor.
absl::StatusOr<PieceEntry> ParsePieceEntry(const std::string& source, const json& entry,
                                           size_t index) {
  const std::string where = absl::StrCat(source, ": tensors[", index, "]");
  if (!entry.is_object()) return absl::DataLossError(where + ": expected an object");
  PieceEntry parsed;
  try {
    parsed.piece.file = entry.at("file").get<std::string>();
    parsed.name = entry.at("name").get<std::string>();
    parsed.dtype = entry.at("dtype").get<std::string>();
    parsed.piece.shape = entry.at("shape").get<std::vector<int64_t>>();
    parsed.piece.bytes = entry.at("bytes").get<uint64_t>();
    parsed.piece.crc32 = entry.at("crc32").get<uint32_t>();
    parsed.global_shape = entry.value("global_shape", parsed.piece.shape);
    parsed.piece.offsets =
        entry.value("offsets", std::vector<int64_t>(parsed.piece.shape.size(), 0));
  } catch (const json::exception& e) {
    return absl::DataLossError(absl::StrCat(
        where, ": ", e.what(),
        " (expected file, name, dtype, shape, bytes, crc32; optional global_shape, offsets)"));
  }
  std::optional<std::string> stem = StemOfRankFile(parsed.piece.file);
  if (!stem) {
    return absl::DataLossError(absl::StrCat(where, ": file \"", parsed.piece.file,
                                            "\", expected model[-RRRRR-of-WWWWW].safetensors or "
                                            "optimizer[-RRRRR-of-WWWWW].safetensors"));
  }
  parsed.stem = *stem;
  const size_t dims = parsed.global_shape.size();
  bool inside = parsed.piece.shape.size() == dims && parsed.piece.offsets.size() == dims;
  for (size_t d = 0; inside && d < dims; ++d) {
    inside = parsed.piece.shape[d] >= 0 && parsed.piece.offsets[d] >= 0 &&
             parsed.piece.offsets[d] + parsed.piece.shape[d] <= parsed.global_shape[d];
  }
  if (!inside) {
    return absl::DataLossError(absl::StrCat(
        where, ": tensor '", parsed.name, "': piece ", ShapeString(parsed.piece.shape), " at ",
        ShapeString(parsed.piece.offsets), " does not fit in ", ShapeString(parsed.global_shape)));
  }
  return parsed;
}

}  // namespace

uint32_t Crc32(absl::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

std::string RankFileName(absl::string_view stem, int rank, int world) {
  if (world == 1) return absl::StrCat(stem, ".safetensors");
  return absl::StrFormat("%s-%05d-of-%05d.safetensors", stem, rank, world);
}

int64_t Volume(const std::vector<int64_t>& shape) {
  int64_t volume = 1;
  for (int64_t size : shape) volume *= size;
  return volume;
}

bool BoxesOverlap(const std::vector<int64_t>& a, const std::vector<int64_t>& a_shape,
                  const std::vector<int64_t>& b, const std::vector<int64_t>& b_shape) {
  for (size_t d = 0; d < a.size(); ++d) {
    if (std::max(a[d], b[d]) >= std::min(a[d] + a_shape[d], b[d] + b_shape[d])) return false;
  }
  return true;
}

json PieceEntryToJson(const std::string& file, const std::string& name, const at::Tensor& tensor,
                      uint32_t crc32, const TensorBox* box) {
  json entry = {{"file", file},
                {"name", name},
                {"dtype", *SafetensorsDtypeName(tensor.scalar_type())},
                {"shape", tensor.sizes().vec()},
                {"bytes", tensor.numel() * tensor.element_size()},
                {"crc32", crc32}};
  if (box != nullptr) {
    entry["global_shape"] = box->global_shape;
    entry["offsets"] = box->offsets;
  }
  return entry;
}

absl::StatusOr<std::vector<PieceEntry>> ParsePieceEntries(const std::string& source,
                                                          const json& tensors) {
  if (!tensors.is_array()) return absl::DataLossError(source + ": tensors: expected an array");
  std::vector<PieceEntry> entries;
  for (size_t i = 0; i < tensors.size(); ++i) {
    TITAN_ASSIGN_OR_RETURN(PieceEntry entry, ParsePieceEntry(source, tensors[i], i));
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::Status GroupPieces(const std::string& source, std::vector<PieceEntry> entries,
                         std::vector<CheckpointTensor>& model,
                         std::vector<CheckpointTensor>& optimizer) {
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (PieceEntry& entry : entries) {
    std::vector<CheckpointTensor>& tensors = entry.stem == kModelStem ? model : optimizer;
    auto [it, inserted] = index.emplace(std::make_pair(entry.stem, entry.name), tensors.size());
    if (inserted) {
      absl::StatusOr<at::ScalarType> type = ScalarTypeFromSafetensorsDtype(entry.dtype);
      if (!type.ok()) {
        return absl::DataLossError(absl::StrCat(source, ": tensor '", entry.name, "': dtype \"",
                                                entry.dtype, "\" is not supported"));
      }
      tensors.push_back({entry.name, entry.dtype, *type, entry.global_shape, {}});
    }
    CheckpointTensor& tensor = tensors[it->second];
    if (entry.dtype != tensor.dtype || entry.global_shape != tensor.shape) {
      return absl::DataLossError(absl::StrCat(source, ": tensor '", entry.name, "': a piece in ",
                                              entry.piece.file, " says ", entry.dtype, " ",
                                              ShapeString(entry.global_shape), ", another ",
                                              tensor.dtype, " ", ShapeString(tensor.shape)));
    }
    tensor.pieces.push_back(std::move(entry.piece));
  }
  for (const auto* tensors : {&model, &optimizer}) {
    for (const CheckpointTensor& tensor : *tensors) {
      int64_t covered = 0;
      for (size_t i = 0; i < tensor.pieces.size(); ++i) {
        const CheckpointPiece& a = tensor.pieces[i];
        covered += Volume(a.shape);
        for (size_t j = i + 1; j < tensor.pieces.size(); ++j) {
          const CheckpointPiece& b = tensor.pieces[j];
          if (BoxesOverlap(a.offsets, a.shape, b.offsets, b.shape) && Volume(a.shape) > 0) {
            return absl::DataLossError(absl::StrCat(source, ": tensor '", tensor.name,
                                                    "': pieces in ", a.file, " and ", b.file,
                                                    " overlap"));
          }
        }
      }
      if (covered != Volume(tensor.shape)) {
        return absl::DataLossError(absl::StrCat(source, ": tensor '", tensor.name,
                                                "': pieces hold ", covered, " of its ",
                                                Volume(tensor.shape), " elements"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace checkpoint_internal
}  // namespace titan
