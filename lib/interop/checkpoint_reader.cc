#include "lib/interop/checkpoint_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <map>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/directory.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/interop/meta_checkpoint.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

constexpr char kHfConfigFile[] = "config.json";
constexpr char kHfSingleFile[] = "model.safetensors";
constexpr char kHfIndexFile[] = "model.safetensors.index.json";
constexpr char kMetaParamsFile[] = "params.json";

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<json> ReadJsonFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  json parsed = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return absl::InvalidArgumentError(path + ": not valid JSON");
  return parsed;
}

// A tensor over `bytes` without a copy when the address suits the dtype, else an owned copy.
at::Tensor TensorOverBytes(absl::string_view bytes, at::ScalarType type,
                           const std::vector<int64_t>& shape) {
  const auto options = at::TensorOptions().dtype(type);
  const size_t alignment = c10::elementSize(type);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignment == 0) {
    return at::from_blob(const_cast<char*>(bytes.data()), shape, options);
  }
  at::Tensor copy = at::empty(shape, options);
  std::memcpy(copy.data_ptr(), bytes.data(), bytes.size());
  return copy;
}

// titan and hf: tensors in one or more safetensors files.
class SafetensorsReader : public CheckpointReader {
 public:
  absl::StatusOr<at::Tensor> Get(absl::string_view name) const override {
    const auto it = location_.find(name);
    if (it == location_.end()) return NotFound(name);
    const SafetensorsFile& file = files_[it->second];
    absl::StatusOr<absl::string_view> bytes = file.Bytes(name);
    if (!bytes.ok()) return bytes.status();
    const SafetensorsEntry* entry = file.Find(name);
    return TensorOverBytes(*bytes, entry->scalar_type, entry->shape);
  }

  absl::StatusOr<absl::string_view> Bytes(absl::string_view name) const override {
    const auto it = location_.find(name);
    if (it == location_.end()) return NotFound(name);
    return files_[it->second].Bytes(name);
  }

  std::vector<std::string> Verify() const override {
    std::vector<std::string> problems;
    for (const auto& [name, crc] : expected_crc32_) {
      absl::StatusOr<absl::string_view> bytes = Bytes(name);
      const uint32_t actual = static_cast<uint32_t>(
          crc32_z(0L, reinterpret_cast<const Bytef*>(bytes->data()), bytes->size()));
      if (actual != crc) {
        problems.push_back(absl::StrCat(directory_, "/", Find(name)->file, ": tensor '", name,
                                        "': CRC-32 ", actual, ", manifest says ", crc));
      }
    }
    if (expected_total_size_ && *expected_total_size_ != TotalBytes()) {
      problems.push_back(absl::StrCat(directory_, "/", kHfIndexFile, ": metadata.total_size ",
                                      *expected_total_size_, ", tensors hold ", TotalBytes()));
    }
    return problems;
  }

  static absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenTitan(const std::string& path);
  static absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenHf(const std::string& path);

 private:
  absl::Status NotFound(absl::string_view name) const {
    return absl::NotFoundError(absl::StrCat(directory_, ": no tensor '", name, "'"));
  }

  uint64_t TotalBytes() const {
    uint64_t total = 0;
    for (const TensorInfo& tensor : tensors_) total += tensor.bytes;
    return total;
  }

  // Opens `path`, appending its tensors; a name already seen is an error.
  absl::Status AddFile(const std::string& path) {
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    if (!file.ok()) return file.status();
    for (const SafetensorsEntry& entry : file->entries()) {
      if (!location_.emplace(entry.name, files_.size()).second) {
        return absl::DataLossError(
            absl::StrCat(path, ": tensor '", entry.name, "' also appears in another file"));
      }
      tensors_.push_back(
          {entry.name, entry.dtype, entry.scalar_type, entry.shape, entry.end - entry.begin,
           BaseName(path)});
    }
    files_.push_back(*std::move(file));
    return absl::OkStatus();
  }

  std::vector<SafetensorsFile> files_;
  absl::flat_hash_map<std::string, size_t> location_;  // name -> index in files_
  std::map<std::string, uint32_t> expected_crc32_;      // titan's manifest
  std::optional<uint64_t> expected_total_size_;         // hf's index
};

absl::StatusOr<std::unique_ptr<CheckpointReader>> SafetensorsReader::OpenTitan(
    const std::string& path) {
  std::string step_dir = path;
  if (!PathExists(absl::StrCat(path, "/", kCheckpointManifestFile))) {
    CheckpointManager manager(path, /*keep_latest_k=*/0);
    absl::StatusOr<int64_t> latest = manager.LatestStep();
    if (!latest.ok()) {
      return absl::NotFoundError(absl::StrCat(
          path, ": not a titan checkpoint (no ", kCheckpointManifestFile, ", no step-N directories)"));
    }
    step_dir = manager.StepDirectory(*latest);
  }
  auto reader = std::unique_ptr<SafetensorsReader>(new SafetensorsReader());
  reader->format_ = CheckpointFormat::kTitan;
  reader->directory_ = step_dir;
  const std::string manifest_path = absl::StrCat(step_dir, "/", kCheckpointManifestFile);
  TITAN_ASSIGN_OR_RETURN(json manifest, ReadJsonFile(manifest_path));
  if (!manifest.is_object() || manifest.value("format_version", json()) != kCheckpointFormatVersion ||
      !manifest.contains("step") || !manifest.at("step").is_number_integer() ||
      !manifest.contains("tensors") || !manifest.at("tensors").is_array()) {
    return absl::DataLossError(absl::StrCat(manifest_path, ": expected format_version ",
                                            kCheckpointFormatVersion,
                                            ", an integer step and a tensors array"));
  }
  reader->step_ = manifest.at("step").get<int64_t>();
  reader->description_ = manifest.value("state", json::object());
  TITAN_RETURN_IF_ERROR(reader->AddFile(absl::StrCat(step_dir, "/", kCheckpointModelFile)));

  std::set<std::string> listed;
  std::vector<TensorInfo> in_manifest_order;  // The model's order, as the trainer saved it.
  for (const json& entry : manifest.at("tensors")) {
    if (!entry.is_object() || entry.value("file", "") != kCheckpointModelFile) continue;
    const std::string name = entry.value("name", "");
    const std::string where = absl::StrCat(manifest_path, ": tensor '", name, "'");
    const TensorInfo* tensor = reader->Find(name);
    if (tensor == nullptr) return absl::DataLossError(where + ": missing from " + kCheckpointModelFile);
    try {
      const auto shape = entry.at("shape").get<std::vector<int64_t>>();
      const auto dtype = entry.at("dtype").get<std::string>();
      const auto bytes = entry.at("bytes").get<uint64_t>();
      if (shape != tensor->shape || dtype != tensor->dtype || bytes != tensor->bytes) {
        return absl::DataLossError(absl::StrCat(
            where, ": manifest says ", dtype, " ", ShapeString(shape), " ", bytes, " bytes, ",
            kCheckpointModelFile, " holds ", tensor->dtype, " ", ShapeString(tensor->shape), " ",
            tensor->bytes, " bytes"));
      }
      reader->expected_crc32_[name] = entry.at("crc32").get<uint32_t>();
    } catch (const json::exception& e) {
      return absl::DataLossError(absl::StrCat(where, ": ", e.what()));
    }
    if (listed.insert(name).second) in_manifest_order.push_back(*tensor);
  }
  for (const TensorInfo& tensor : reader->tensors_) {
    if (listed.count(tensor.name) == 0) {
      return absl::DataLossError(absl::StrCat(step_dir, "/", kCheckpointModelFile, ": tensor '",
                                              tensor.name, "' is not listed in the manifest"));
    }
  }
  reader->tensors_ = std::move(in_manifest_order);
  return std::unique_ptr<CheckpointReader>(std::move(reader));
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> SafetensorsReader::OpenHf(
    const std::string& path) {
  auto reader = std::unique_ptr<SafetensorsReader>(new SafetensorsReader());
  reader->format_ = CheckpointFormat::kHf;
  reader->directory_ = path;
  TITAN_ASSIGN_OR_RETURN(reader->description_, ReadJsonFile(absl::StrCat(path, "/", kHfConfigFile)));
  const std::string index_path = absl::StrCat(path, "/", kHfIndexFile);
  if (!PathExists(index_path)) {
    TITAN_RETURN_IF_ERROR(reader->AddFile(absl::StrCat(path, "/", kHfSingleFile)));
    return std::unique_ptr<CheckpointReader>(std::move(reader));
  }
  TITAN_ASSIGN_OR_RETURN(std::string index_text, ReadFile(index_path));
  TITAN_ASSIGN_OR_RETURN(HfIndex index, ParseHfIndex(index_text, index_path));
  const std::map<std::string, std::string>& weight_map = index.weight_map;
  std::set<std::string> shards;
  for (const auto& [name, file] : weight_map) shards.insert(file);
  for (const std::string& shard : shards) {
    TITAN_RETURN_IF_ERROR(reader->AddFile(absl::StrCat(path, "/", shard)));
  }
  for (const TensorInfo& tensor : reader->tensors_) {
    const auto it = weight_map.find(tensor.name);
    if (it == weight_map.end() || it->second != tensor.file) {
      return absl::DataLossError(absl::StrCat(
          index_path, ": tensor '", tensor.name, "' is in ", tensor.file, ", the index says ",
          it == weight_map.end() ? "nothing" : it->second));
    }
  }
  for (const auto& [name, file] : weight_map) {
    if (reader->Find(name) == nullptr) {
      return absl::DataLossError(
          absl::StrCat(index_path, ": tensor '", name, "' is missing from ", file));
    }
  }
  reader->expected_total_size_ = index.total_size;
  return std::unique_ptr<CheckpointReader>(std::move(reader));
}

}  // namespace

absl::StatusOr<HfIndex> ParseHfIndex(absl::string_view text, const std::string& source) {
  const json index = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object()) {
    return absl::DataLossError(source + ": expected an object with a \"weight_map\" object");
  }
  HfIndex parsed;
  for (const auto& [name, file] : index.at("weight_map").items()) {
    if (!file.is_string() || file.get<std::string>().empty() ||
        absl::StrContains(file.get<std::string>(), "/")) {
      return absl::DataLossError(absl::StrCat(source, ": weight_map[\"", name,
                                              "\"]: expected a file name in this directory"));
    }
    parsed.weight_map[name] = file.get<std::string>();
  }
  const auto metadata = index.find("metadata");
  if (metadata != index.end() && metadata->is_object()) {
    const auto total = metadata->find("total_size");
    if (total != metadata->end() && total->is_number_unsigned()) {
      parsed.total_size = total->get<uint64_t>();
    }
  }
  return parsed;
}

std::string CheckpointFormatName(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::kTitan:
      return "titan";
    case CheckpointFormat::kHf:
      return "hf";
    case CheckpointFormat::kMeta:
      return "meta";
  }
  return "unknown";
}

absl::StatusOr<CheckpointFormat> ParseCheckpointFormat(absl::string_view name) {
  for (CheckpointFormat format :
       {CheckpointFormat::kTitan, CheckpointFormat::kHf, CheckpointFormat::kMeta}) {
    if (name == CheckpointFormatName(format)) return format;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint format \"", name, "\", expected titan, hf or meta"));
}

absl::StatusOr<CheckpointFormat> DetectCheckpointFormat(const std::string& path) {
  if (!IsDirectory(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": not a directory"));
  }
  if (PathExists(absl::StrCat(path, "/", kCheckpointManifestFile))) return CheckpointFormat::kTitan;
  if (PathExists(absl::StrCat(path, "/", kHfConfigFile))) return CheckpointFormat::kHf;
  if (PathExists(absl::StrCat(path, "/", kMetaParamsFile))) return CheckpointFormat::kMeta;
  absl::StatusOr<std::vector<int64_t>> steps = CheckpointManager(path, 0).ListSteps();
  if (steps.ok() && !steps->empty()) return CheckpointFormat::kTitan;
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": unknown checkpoint format (expected manifest.json or step-N/ for titan, ",
      "config.json for hf, params.json for meta)"));
}

const TensorInfo* CheckpointReader::Find(absl::string_view name) const {
  for (const TensorInfo& tensor : tensors_) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(
    const std::string& path, std::optional<CheckpointFormat> format) {
  if (!format) {
    absl::StatusOr<CheckpointFormat> detected = DetectCheckpointFormat(path);
    if (!detected.ok()) return detected.status();
    format = *detected;
  }
  switch (*format) {
    case CheckpointFormat::kTitan:
      return SafetensorsReader::OpenTitan(path);
    case CheckpointFormat::kHf:
      return SafetensorsReader::OpenHf(path);
    case CheckpointFormat::kMeta:
      return OpenMetaCheckpoint(path);
  }
  return absl::InvalidArgumentError("unknown checkpoint format");
}

}  // namespace titan
