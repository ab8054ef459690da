#include "lib/checkpoint/checkpoint_step.h"

#include <c10/core/GradMode.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/util/directory.h"
#include "lib/util/json_file.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using checkpoint_internal::BoxesOverlap;
using checkpoint_internal::Crc32;
using checkpoint_internal::GroupPieces;
using checkpoint_internal::ParsePieceEntries;
using checkpoint_internal::PieceEntry;
using checkpoint_internal::Volume;
using nlohmann::json;

// A manifest number for an error message; other JSON by type only (it could be huge).
std::string Describe(const json& value) {
  return value.is_number() ? value.dump() : value.type_name();
}

// Copies the overlap of `source` (at `source_offsets` in the whole tensor) into `destination` (at
// `destination_offsets`); nothing when they do not overlap.
void CopyOverlap(const at::Tensor& source, const std::vector<int64_t>& source_offsets,
                 const at::Tensor& destination, const std::vector<int64_t>& destination_offsets) {
  at::Tensor from = source;
  at::Tensor to = destination;
  for (int64_t d = 0; d < source.dim(); ++d) {
    const int64_t begin = std::max(source_offsets[d], destination_offsets[d]);
    const int64_t end =
        std::min(source_offsets[d] + source.size(d), destination_offsets[d] + destination.size(d));
    if (end <= begin) return;
    from = from.narrow(d, begin - source_offsets[d], end - begin);
    to = to.narrow(d, begin - destination_offsets[d], end - begin);
  }
  to.copy_(from);
}

}  // namespace

// The step's safetensors files, opened once each.
class CheckpointStep::Files {
 public:
  std::map<std::string, SafetensorsFile> by_name;
  std::map<std::string, std::string> damaged;              // file name -> what is wrong with it
  std::set<std::pair<std::string, std::string>> verified;  // (file, tensor) checked against CRCs
};

CheckpointStep::~CheckpointStep() = default;

absl::StatusOr<std::unique_ptr<CheckpointStep>> CheckpointStep::Open(const std::string& dir,
                                                                     int64_t expected_step) {
  return Open(dir, expected_step, OpenOptions());
}

namespace {

// Opens one of the step's files and checks it against the pieces the manifest places in it, and
// the reverse.
absl::StatusOr<SafetensorsFile> OpenListedFile(const std::string& path,
                                               const std::vector<const PieceEntry*>& listed) {
  TITAN_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  std::set<std::string> names;
  for (const PieceEntry* entry : listed) {
    const std::string where = absl::StrCat(file.path(), ": tensor '", entry->name, "'");
    names.insert(entry->name);
    const SafetensorsEntry* in_file = file.Find(entry->name);
    if (in_file == nullptr) return absl::DataLossError(where + ": listed in the manifest, missing");
    if (in_file->dtype != entry->dtype || in_file->shape != entry->piece.shape ||
        in_file->end - in_file->begin != entry->piece.bytes) {
      return absl::DataLossError(absl::StrCat(
          where, ": ", in_file->dtype, " ", ShapeString(in_file->shape), " ",
          in_file->end - in_file->begin, " bytes in the file, manifest says ", entry->dtype, " ",
          ShapeString(entry->piece.shape), " ", entry->piece.bytes, " bytes"));
    }
  }
  for (const std::string& name : file.names()) {
    if (names.count(name) == 0) {
      return absl::DataLossError(
          absl::StrCat(file.path(), ": tensor '", name, "' is not listed in the manifest"));
    }
  }
  return file;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointStep>> CheckpointStep::Open(const std::string& dir,
                                                                     int64_t expected_step,
                                                                     const OpenOptions& options) {
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such checkpoint"));
  }
  const std::string manifest_path = absl::StrCat(dir, "/", kCheckpointManifestFile);
  if (!PathExists(manifest_path)) {
    // Save commits a step by renaming a folder with its manifest into place: a step folder without
    // one was made some other way, most likely a copy cut short.
    return absl::NotFoundError(absl::StrCat(
        manifest_path,
        ": open failed: No such file or directory (a step folder without its manifest: an "
        "interrupted copy? Remove the folder, or read another step: its step-N folder as the "
        "path, or titan_train's --checkpoint.load_step)"));
  }
  TITAN_ASSIGN_OR_RETURN(json manifest, ReadJsonFile(manifest_path));
  if (!manifest.is_object()) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": not a valid JSON object"));
  }
  const auto version = manifest.find("format_version");
  if (version == manifest.end() || *version != kCheckpointFormatVersion) {
    return absl::DataLossError(
        absl::StrCat(manifest_path, ": format_version ",
                     version == manifest.end() ? "missing" : Describe(*version), ", expected ",
                     kCheckpointFormatVersion));
  }
  const auto saved_step = manifest.find("step");
  if (saved_step == manifest.end() || !saved_step->is_number_integer() ||
      (expected_step >= 0 && *saved_step != expected_step)) {
    return absl::DataLossError(absl::StrCat(
        manifest_path, ": step ", saved_step == manifest.end() ? "missing" : Describe(*saved_step),
        expected_step >= 0 ? absl::StrCat(", expected ", expected_step) : ", expected an integer"));
  }
  const auto model_only = manifest.find("model_only");
  const auto tensors = manifest.find("tensors");
  const auto state = manifest.find("state");
  if (model_only == manifest.end() || !model_only->is_boolean() || tensors == manifest.end() ||
      !tensors->is_array() || state == manifest.end() || !state->is_object()) {
    return absl::DataLossError(absl::StrCat(
        manifest_path, ": expected boolean model_only, array tensors and object state"));
  }
  auto step = std::unique_ptr<CheckpointStep>(new CheckpointStep());
  step->dir_ = dir;
  step->step_ = saved_step->get<int64_t>();
  step->model_only_ = model_only->get<bool>();
  step->state_ = *state;
  step->files_ = std::make_unique<Files>();
  TITAN_ASSIGN_OR_RETURN(std::vector<PieceEntry> entries,
                         ParsePieceEntries(manifest_path, *tensors));

  // Every file against the pieces the manifest places in it, and the reverse.
  std::map<std::string, std::vector<const PieceEntry*>> by_file;
  std::set<std::string> model_files;
  for (const PieceEntry& entry : entries) {
    by_file[entry.piece.file].push_back(&entry);
    if (entry.stem == "model") model_files.insert(entry.piece.file);
  }
  for (const auto& [file_name, listed] : by_file) {
    if (options.model_files_only && model_files.count(file_name) == 0) continue;
    absl::StatusOr<SafetensorsFile> file =
        OpenListedFile(absl::StrCat(dir, "/", file_name), listed);
    if (!file.ok() && options.keep_damaged_files) {
      step->files_->damaged.emplace(file_name, file.status().message());
      step->damaged_.push_back(std::string(file.status().message()));
      continue;
    }
    TITAN_RETURN_IF_ERROR(file.status());
    step->files_->by_name.emplace(file_name, *std::move(file));
  }
  TITAN_RETURN_IF_ERROR(
      GroupPieces(manifest_path, std::move(entries), step->model_, step->optimizer_));
  if (step->model_only_ && !step->optimizer_.empty()) {
    return absl::DataLossError(
        absl::StrCat(manifest_path, ": model-only checkpoint lists optimizer tensors"));
  }
  return step;
}

absl::StatusOr<absl::string_view> CheckpointStep::PieceBytes(const Tensor& tensor,
                                                             const Piece& piece,
                                                             bool verify_checksums) const {
  const auto opened = files_->by_name.find(piece.file);
  if (opened == files_->by_name.end()) {
    const auto damaged = files_->damaged.find(piece.file);
    return absl::FailedPreconditionError(
        damaged != files_->damaged.end()
            ? damaged->second
            : absl::StrCat(dir_, "/", piece.file, ": not opened (model files only)"));
  }
  const SafetensorsFile& file = opened->second;
  TITAN_ASSIGN_OR_RETURN(absl::string_view bytes, file.Bytes(tensor.name));
  if (verify_checksums && files_->verified.emplace(piece.file, tensor.name).second) {
    const uint32_t crc = Crc32(bytes);
    if (crc != piece.crc32) {
      files_->verified.erase({piece.file, tensor.name});
      return absl::DataLossError(absl::StrCat(file.path(), ": tensor '", tensor.name, "': CRC-32 ",
                                              crc, " does not match the manifest's ", piece.crc32));
    }
  }
  return bytes;
}

absl::StatusOr<absl::string_view> CheckpointStep::WholeBytes(const Tensor& tensor) const {
  if (tensor.pieces.size() != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir_, ": tensor '", tensor.name, "' is split into ", tensor.pieces.size(), " pieces"));
  }
  return PieceBytes(tensor, tensor.pieces[0], /*verify_checksums=*/false);
}

absl::StatusOr<at::Tensor> CheckpointStep::Read(const Tensor& tensor, bool verify_checksums) const {
  try {
    if (tensor.pieces.size() == 1) {
      TITAN_ASSIGN_OR_RETURN(absl::string_view bytes,
                             PieceBytes(tensor, tensor.pieces[0], verify_checksums));
      return TensorOverBytes(bytes, tensor.scalar_type, tensor.shape);
    }
    at::Tensor whole = at::empty(tensor.shape, at::TensorOptions().dtype(tensor.scalar_type));
    TITAN_RETURN_IF_ERROR(ReadInto(tensor, whole, nullptr, verify_checksums));
    return whole;
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(dir_, ": tensor '", tensor.name, "': ", e.what_without_backtrace()));
  }
}

absl::Status CheckpointStep::ReadInto(const Tensor& tensor, const at::Tensor& destination,
                                      const TensorBox* box, bool verify_checksums) const {
  const std::vector<int64_t> offsets =
      box != nullptr ? box->offsets : std::vector<int64_t>(tensor.shape.size(), 0);
  const bool fits = box != nullptr ? box->global_shape == tensor.shape &&
                                         offsets.size() == static_cast<size_t>(destination.dim())
                                   : destination.sizes().vec() == tensor.shape;
  if (!fits) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir_, ": tensor '", tensor.name, "' is ", ShapeString(tensor.shape),
                     ", destination ", ShapeString(destination.sizes().vec()),
                     box != nullptr ? absl::StrCat(" in ", ShapeString(box->global_shape)) : ""));
  }
  c10::NoGradGuard no_grad;  // Destinations may be parameters.
  try {
    for (const Piece& piece : tensor.pieces) {
      if (Volume(piece.shape) == 0 ||
          !BoxesOverlap(piece.offsets, piece.shape, offsets, destination.sizes().vec())) {
        continue;
      }
      TITAN_ASSIGN_OR_RETURN(absl::string_view bytes, PieceBytes(tensor, piece, verify_checksums));
      CopyOverlap(TensorOverBytes(bytes, tensor.scalar_type, piece.shape), piece.offsets,
                  destination, offsets);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(dir_, ": tensor '", tensor.name,
                                            "': copy failed: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

std::vector<std::string> CheckpointStep::Verify() const {
  std::vector<std::string> problems = damaged_;
  for (const auto* tensors : {&model_, &optimizer_}) {
    for (const Tensor& tensor : *tensors) {
      for (const Piece& piece : tensor.pieces) {
        if (files_->by_name.count(piece.file) == 0) continue;  // Damaged, or not opened.
        absl::StatusOr<absl::string_view> bytes = PieceBytes(tensor, piece, true);
        if (!bytes.ok()) problems.push_back(std::string(bytes.status().message()));
      }
    }
  }
  return problems;
}

}  // namespace titan
