#include "lib/checkpoint/checkpoint_manager.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/checkpoint/directory.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using nlohmann::json;

constexpr char kStepPrefix[] = "step-";
constexpr char kTemporaryInfix[] = ".tmp-";

// CRC-32 rather than SHA-256: it guards against torn writes and bit rot, not tampering, zlib is
// already a dependency, and it keeps pace with the disk on multi-GB checkpoints.
uint32_t Crc32(absl::string_view bytes) {
  return static_cast<uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// `name` is "step-<digits>": returns the step.
std::optional<int64_t> ParseStepName(const std::string& name) {
  if (!absl::StartsWith(name, kStepPrefix)) return std::nullopt;
  const std::string digits = name.substr(std::strlen(kStepPrefix));
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit)) {
    return std::nullopt;
  }
  int64_t step;
  // "step-007" is not ours: StepDirectory(7) is "step-7".
  if (!absl::SimpleAtoi(digits, &step) || absl::StrCat(step) != digits) return std::nullopt;
  return step;
}

// Swaps `from` into `to` atomically where the filesystem can (renameat2 RENAME_EXCHANGE), leaving
// the old `to` at `from`; elsewhere moves the old `to` aside to `aside` first.
absl::Status ReplaceDirectory(const std::string& from, const std::string& to,
                              const std::string& aside, std::string& old_location) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0) {
    old_location = from;
    return absl::OkStatus();
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    return ErrnoError("exchange with " + to, from);
  }
  if (::rename(to.c_str(), aside.c_str()) != 0) return ErrnoError("rename to " + aside, to);
  if (::rename(from.c_str(), to.c_str()) != 0) {
    absl::Status status = ErrnoError("rename to " + to, from);
    ::rename(aside.c_str(), to.c_str());  // Put the old step back rather than lose it.
    return status;
  }
  old_location = aside;
  return absl::OkStatus();
}

// A manifest number for an error message; other JSON by type only (it could be huge).
std::string Describe(const json& value) {
  return value.is_number() ? value.dump() : value.type_name();
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// One manifest entry, checked for the fields and types it needs.
struct ManifestTensor {
  std::string file;
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

absl::StatusOr<ManifestTensor> ParseManifestTensor(const std::string& manifest_path,
                                                   const json& entry, size_t index) {
  const std::string where = absl::StrCat(manifest_path, ": tensors[", index, "]");
  if (!entry.is_object()) return absl::DataLossError(where + ": expected an object");
  ManifestTensor tensor;
  try {
    tensor.file = entry.at("file").get<std::string>();
    tensor.name = entry.at("name").get<std::string>();
    tensor.dtype = entry.at("dtype").get<std::string>();
    tensor.shape = entry.at("shape").get<std::vector<int64_t>>();
    tensor.bytes = entry.at("bytes").get<uint64_t>();
    tensor.crc32 = entry.at("crc32").get<uint32_t>();
  } catch (const json::exception& e) {
    return absl::DataLossError(
        absl::StrCat(where, ": ", e.what(), " (expected file, name, dtype, shape, bytes, crc32)"));
  }
  if (tensor.file != kCheckpointModelFile && tensor.file != kCheckpointOptimizerFile) {
    return absl::DataLossError(absl::StrCat(where, ": file \"", tensor.file, "\", expected \"",
                                            kCheckpointModelFile, "\" or \"", kCheckpointOptimizerFile, "\""));
  }
  return tensor;
}

// Checks every manifest entry of one file against the file, and the file against the manifest.
absl::Status CheckFileAgainstManifest(const SafetensorsFile& file,
                                      const std::vector<ManifestTensor>& listed,
                                      bool verify_checksums) {
  std::set<std::string> names;
  for (const ManifestTensor& tensor : listed) {
    const std::string where = absl::StrCat(file.path(), ": tensor '", tensor.name, "'");
    names.insert(tensor.name);
    const SafetensorsEntry* entry = file.Find(tensor.name);
    if (entry == nullptr) return absl::DataLossError(where + ": listed in the manifest, missing");
    if (entry->dtype != tensor.dtype || entry->shape != tensor.shape) {
      return absl::DataLossError(absl::StrCat(
          where, ": ", entry->dtype, " ", ShapeString(entry->shape), " in the file, manifest says ",
          tensor.dtype, " ", ShapeString(tensor.shape)));
    }
    if (entry->end - entry->begin != tensor.bytes) {
      return absl::DataLossError(absl::StrCat(where, ": ", entry->end - entry->begin,
                                              " bytes in the file, manifest says ", tensor.bytes));
    }
    if (verify_checksums) {
      const uint32_t crc = Crc32(*file.Bytes(tensor.name));
      if (crc != tensor.crc32) {
        return absl::DataLossError(
            absl::StrCat(where, ": CRC-32 ", crc, " does not match the manifest's ", tensor.crc32));
      }
    }
  }
  for (const std::string& name : file.names()) {
    if (names.count(name) == 0) {
      return absl::DataLossError(
          absl::StrCat(file.path(), ": tensor '", name, "' is not listed in the manifest"));
    }
  }
  return absl::OkStatus();
}

// Compares the caller's tensors with a checkpoint file's, collecting every problem in one message.
absl::Status CheckDestinations(const NamedTensors& destinations,
                               const std::vector<ManifestTensor>& listed, const std::string& path) {
  std::map<std::string, const ManifestTensor*> saved;
  for (const ManifestTensor& tensor : listed) saved[tensor.name] = &tensor;
  std::set<std::string> wanted;
  std::vector<std::string> missing, unexpected, mismatched, duplicated;
  for (const auto& [name, tensor] : destinations) {
    if (!wanted.insert(name).second) duplicated.push_back(name);
    auto it = saved.find(name);
    if (it == saved.end()) {
      missing.push_back(name);
    } else if (!tensor.defined() || tensor.sizes().vec() != it->second->shape) {
      mismatched.push_back(
          absl::StrCat(name, ": checkpoint ", ShapeString(it->second->shape), ", destination ",
                       tensor.defined() ? ShapeString(tensor.sizes().vec()) : "undefined"));
    }
  }
  for (const auto& [name, unused] : saved) {
    if (wanted.count(name) == 0) unexpected.push_back(name);
  }
  std::vector<std::string> problems;
  if (!missing.empty()) problems.push_back("missing keys: " + absl::StrJoin(missing, ", "));
  if (!unexpected.empty())
    problems.push_back("unexpected keys: " + absl::StrJoin(unexpected, ", "));
  if (!duplicated.empty()) problems.push_back("duplicate keys: " + absl::StrJoin(duplicated, ", "));
  if (!mismatched.empty()) problems.push_back("shape mismatch: " + absl::StrJoin(mismatched, "; "));
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", absl::StrJoin(problems, "; ")));
}

}  // namespace

struct CheckpointManager::OpenStep {
  std::optional<SafetensorsFile> model;
  std::optional<SafetensorsFile> optimizer;  // Unset for model-only checkpoints.
  std::vector<ManifestTensor> model_tensors;
  std::vector<ManifestTensor> optimizer_tensors;
  json state;
};

CheckpointManager::CheckpointManager(std::string root, int keep_latest_k)
    : root_(std::move(root)), keep_latest_k_(keep_latest_k) {}

std::string CheckpointManager::StepDirectory(int64_t step) const {
  return absl::StrCat(root_, "/", kStepPrefix, step);
}

absl::Status CheckpointManager::Save(int64_t step, const CheckpointState& state, bool model_only) {
  const auto start = std::chrono::steady_clock::now();
  if (step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(root_, ": step ", step, " is negative"));
  }
  if (!state.extra.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(root_, ": step ", step,
                                                   ": extra state must be a JSON object, got ",
                                                   state.extra.type_name()));
  }
  absl::Status status = MakeDirectories(root_);
  if (!status.ok()) return status;
  status = RemoveStaleTemporaries();
  if (!status.ok()) return status;

  const std::string final_dir = StepDirectory(step);
  const std::string tmp_dir = absl::StrCat(final_dir, kTemporaryInfix, ::getpid());
  if (::mkdir(tmp_dir.c_str(), 0755) != 0) return ErrnoError("mkdir", tmp_dir);
  auto fail = [&](absl::Status failure) {
    RemoveTree(tmp_dir).IgnoreError();  // Best effort: the next Save removes it anyway.
    return failure;
  };

  json tensors = json::array();
  uint64_t total_bytes = 0;
  auto write_file = [&](const char* file, const NamedTensors& named) {
    std::map<std::string, uint32_t> crcs;
    absl::Status written = WriteSafetensors(
        absl::StrCat(tmp_dir, "/", file), named, {{"format", "pt"}},
        [&](const std::string& name, absl::string_view bytes) { crcs[name] = Crc32(bytes); });
    if (!written.ok()) return written;
    for (const auto& [name, tensor] : named) {
      const uint64_t bytes = tensor.numel() * tensor.element_size();
      total_bytes += bytes;
      tensors.push_back({{"file", file},
                         {"name", name},
                         {"dtype", *SafetensorsDtypeName(tensor.scalar_type())},
                         {"shape", tensor.sizes().vec()},
                         {"bytes", bytes},
                         {"crc32", crcs.at(name)}});
    }
    return absl::OkStatus();
  };
  status = write_file(kCheckpointModelFile, state.model);
  if (!status.ok()) return fail(status);
  if (!model_only) {
    status = write_file(kCheckpointOptimizerFile, state.optimizer);
    if (!status.ok()) return fail(status);
  }
  const json manifest = {{"format_version", kCheckpointFormatVersion},
                         {"step", step},
                         {"model_only", model_only},
                         {"tensors", tensors},
                         {"state", state.extra}};
  std::string manifest_text;
  try {
    manifest_text = manifest.dump(2);
  } catch (const json::exception& e) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat(tmp_dir, "/", kCheckpointManifestFile, ": cannot encode: ", e.what())));
  }
  status = WriteFileAtomically(absl::StrCat(tmp_dir, "/", kCheckpointManifestFile), manifest_text);
  if (!status.ok()) return fail(status);
  status = FsyncDirectory(tmp_dir);
  if (!status.ok()) return fail(status);

  // Commit: step-<N> appears whole in one rename (or one exchange when replacing it).
  std::string old_dir;
  if (PathExists(final_dir)) {
    status = ReplaceDirectory(tmp_dir, final_dir, absl::StrCat(tmp_dir, "-replaced"), old_dir);
  } else if (::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) {
    status = ErrnoError("rename to " + final_dir, tmp_dir);
  }
  if (!status.ok()) return fail(status);
  status = FsyncDirectory(root_);
  if (!status.ok()) return status;
  if (!old_dir.empty()) {
    status = RemoveTree(old_dir);
    if (!status.ok()) {
      LOG(WARNING) << "Replaced " << final_dir << " but kept the old copy: " << status;
    }
  }

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LOG(INFO) << "Saved checkpoint " << final_dir << (model_only ? " (model only)" : "") << ": "
            << tensors.size() << " tensors, " << total_bytes / 1e6 << " MB in " << seconds << " s";
  return EnforceKeepLatest();
}

absl::StatusOr<std::vector<int64_t>> CheckpointManager::ListSteps() const {
  std::vector<int64_t> steps;
  if (!PathExists(root_)) return steps;
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(root_);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    std::optional<int64_t> step = ParseStepName(name);
    if (step && IsDirectory(absl::StrCat(root_, "/", name))) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<int64_t> CheckpointManager::LatestStep() const {
  absl::StatusOr<std::vector<int64_t>> steps = ListSteps();
  if (!steps.ok()) return steps.status();
  if (steps->empty()) return absl::NotFoundError(absl::StrCat(root_, ": no checkpoints"));
  return steps->back();
}

absl::Status CheckpointManager::RemoveStaleTemporaries() const {
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(root_);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    if (!absl::StartsWith(name, kStepPrefix) || !absl::StrContains(name, kTemporaryInfix)) continue;
    const std::string path = absl::StrCat(root_, "/", name);
    LOG(WARNING) << "Removing " << path << " left by an interrupted save";
    absl::Status status = RemoveTree(path);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status CheckpointManager::EnforceKeepLatest() const {
  if (keep_latest_k_ <= 0) return absl::OkStatus();
  absl::StatusOr<std::vector<int64_t>> steps = ListSteps();
  if (!steps.ok()) return steps.status();
  const size_t keep = static_cast<size_t>(keep_latest_k_);
  for (size_t i = 0; i + keep < steps->size(); ++i) {
    const std::string dir = StepDirectory((*steps)[i]);
    // Renamed first so a crash mid-delete leaves a temporary, never a half step.
    const std::string doomed = absl::StrCat(dir, kTemporaryInfix, ::getpid(), "-deleted");
    if (::rename(dir.c_str(), doomed.c_str()) != 0) return ErrnoError("rename to " + doomed, dir);
    absl::Status status = RemoveTree(doomed);
    if (!status.ok()) return status;
    LOG(INFO) << "Deleted checkpoint " << dir << " (keep_latest_k=" << keep_latest_k_ << ")";
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointManager::OpenStep> CheckpointManager::Open(int64_t step,
                                                                    bool need_optimizer,
                                                                    bool verify_checksums) const {
  const std::string dir = StepDirectory(step);
  if (!IsDirectory(dir)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such checkpoint"));
  }
  const std::string manifest_path = absl::StrCat(dir, "/", kCheckpointManifestFile);
  absl::StatusOr<std::string> text = ReadFile(manifest_path);
  if (!text.ok()) return text.status();
  json manifest = json::parse(*text, nullptr, /*allow_exceptions=*/false);
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
  if (saved_step == manifest.end() || *saved_step != step) {
    return absl::DataLossError(absl::StrCat(
        manifest_path, ": step ", saved_step == manifest.end() ? "missing" : Describe(*saved_step),
        ", expected ", step));
  }
  const auto model_only = manifest.find("model_only");
  const auto tensors = manifest.find("tensors");
  const auto state = manifest.find("state");
  if (model_only == manifest.end() || !model_only->is_boolean() || tensors == manifest.end() ||
      !tensors->is_array() || state == manifest.end() || !state->is_object()) {
    return absl::DataLossError(absl::StrCat(
        manifest_path, ": expected boolean model_only, array tensors and object state"));
  }
  if (need_optimizer && model_only->get<bool>()) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": model-only checkpoint has no optimizer state"));
  }

  OpenStep open;
  open.state = *state;
  for (size_t i = 0; i < tensors->size(); ++i) {
    absl::StatusOr<ManifestTensor> tensor = ParseManifestTensor(manifest_path, (*tensors)[i], i);
    if (!tensor.ok()) return tensor.status();
    (tensor->file == kCheckpointModelFile ? open.model_tensors : open.optimizer_tensors)
        .push_back(*std::move(tensor));
  }
  absl::StatusOr<SafetensorsFile> model = SafetensorsFile::Open(absl::StrCat(dir, "/", kCheckpointModelFile));
  if (!model.ok()) return model.status();
  absl::Status status = CheckFileAgainstManifest(*model, open.model_tensors, verify_checksums);
  if (!status.ok()) return status;
  open.model.emplace(*std::move(model));
  if (!model_only->get<bool>()) {
    absl::StatusOr<SafetensorsFile> optimizer =
        SafetensorsFile::Open(absl::StrCat(dir, "/", kCheckpointOptimizerFile));
    if (!optimizer.ok()) return optimizer.status();
    status = CheckFileAgainstManifest(*optimizer, open.optimizer_tensors, verify_checksums);
    if (!status.ok()) return status;
    open.optimizer.emplace(*std::move(optimizer));
  } else if (!open.optimizer_tensors.empty()) {
    return absl::DataLossError(
        absl::StrCat(manifest_path, ": model-only checkpoint lists optimizer tensors"));
  }
  return open;
}

absl::StatusOr<CheckpointState> CheckpointManager::Load(int64_t step, bool verify_checksums) const {
  absl::StatusOr<OpenStep> open = Open(step, /*need_optimizer=*/false, verify_checksums);
  if (!open.ok()) return open.status();
  CheckpointState state;
  state.extra = std::move(open->state);
  auto load_all = [](const SafetensorsFile& file, const std::vector<ManifestTensor>& listed,
                     NamedTensors& out) {
    for (const ManifestTensor& tensor : listed) {
      absl::StatusOr<at::Tensor> loaded = file.Load(tensor.name);
      if (!loaded.ok()) return loaded.status();
      out.emplace_back(tensor.name, *std::move(loaded));
    }
    return absl::OkStatus();
  };
  absl::Status status = load_all(*open->model, open->model_tensors, state.model);
  if (!status.ok()) return status;
  if (open->optimizer) {
    status = load_all(*open->optimizer, open->optimizer_tensors, state.optimizer);
    if (!status.ok()) return status;
  }
  return state;
}

absl::Status CheckpointManager::LoadInto(int64_t step, const NamedTensors& model,
                                         const NamedTensors* optimizer, nlohmann::json* extra,
                                         bool verify_checksums) const {
  absl::StatusOr<OpenStep> open = Open(step, optimizer != nullptr, verify_checksums);
  if (!open.ok()) return open.status();
  absl::Status status = CheckDestinations(model, open->model_tensors, open->model->path());
  if (!status.ok()) return status;
  if (optimizer != nullptr) {
    status = CheckDestinations(*optimizer, open->optimizer_tensors, open->optimizer->path());
    if (!status.ok()) return status;
  }
  for (const auto& [name, tensor] : model) {
    status = open->model->LoadInto(name, tensor);
    if (!status.ok()) return status;
  }
  if (optimizer != nullptr) {
    for (const auto& [name, tensor] : *optimizer) {
      status = open->optimizer->LoadInto(name, tensor);
      if (!status.ok()) return status;
    }
  }
  if (extra != nullptr) *extra = std::move(open->state);
  return absl::OkStatus();
}

}  // namespace titan
