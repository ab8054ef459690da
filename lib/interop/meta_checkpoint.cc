#include "lib/interop/meta_checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "lib/interop/torch_state_dict.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/json_file.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

constexpr char kParamsFile[] = "params.json";
constexpr char kWeightsFile[] = "consolidated.00.pth";

class MetaReader : public CheckpointReader {
 public:
  absl::StatusOr<at::Tensor> Get(absl::string_view name) const override {
    const auto it = tensors_by_name_.find(name);
    if (it == tensors_by_name_.end()) {
      return absl::NotFoundError(absl::StrCat(directory_, ": no tensor '", name, "'"));
    }
    return it->second;
  }

  absl::StatusOr<absl::string_view> Bytes(absl::string_view name) const override {
    absl::StatusOr<at::Tensor> tensor = Get(name);
    if (!tensor.ok()) return tensor.status();
    return absl::string_view(static_cast<const char*>(tensor->data_ptr()), tensor->nbytes());
  }

  // torch.save keeps no checksums; the zip reader already checked the archive's structure.
  std::vector<std::string> Verify() const override { return damaged_; }
  std::vector<std::string> Damaged() const override { return damaged_; }

  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& directory,
                                                                bool keep_damaged) {
    auto reader = std::unique_ptr<MetaReader>(new MetaReader());
    reader->format_ = CheckpointFormat::kMeta;
    reader->directory_ = directory;
    const std::string params_path = absl::StrCat(directory, "/", kParamsFile);
    TITAN_ASSIGN_OR_RETURN(reader->description_, ReadJsonFile(params_path));
    if (!reader->description_.is_object()) {
      return absl::InvalidArgumentError(params_path + ": expected a JSON object");
    }
    if (PathExists(absl::StrCat(directory, "/consolidated.01.pth"))) {
      return absl::UnimplementedError(absl::StrCat(
          directory, ": model-parallel checkpoints (consolidated.01.pth ...) are not supported"));
    }
    absl::StatusOr<NamedTensors> tensors = ReadWeights(absl::StrCat(directory, "/", kWeightsFile));
    if (!tensors.ok()) {
      if (!keep_damaged) return tensors.status();
      reader->damaged_.push_back(std::string(tensors.status().message()));
      return std::unique_ptr<CheckpointReader>(std::move(reader));
    }
    for (auto& [name, tensor] : *tensors) {
      reader->tensors_.push_back({name, *SafetensorsDtypeName(tensor.scalar_type()),
                                  tensor.scalar_type(), tensor.sizes().vec(),
                                  static_cast<uint64_t>(tensor.nbytes()), kWeightsFile});
      reader->tensors_by_name_[name] = std::move(tensor);
    }
    return std::unique_ptr<CheckpointReader>(std::move(reader));
  }

 private:
  static absl::StatusOr<NamedTensors> ReadWeights(const std::string& path) {
    if (!PathExists(path)) return absl::NotFoundError(path + ": no such file");
    return ReadTorchStateDictFile(path);
  }

  absl::flat_hash_map<std::string, at::Tensor> tensors_by_name_;
  std::vector<std::string> damaged_;  // consolidated.00.pth's problem, when kept.
};

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenMetaCheckpoint(const std::string& directory,
                                                                     bool keep_damaged) {
  return MetaReader::Open(directory, keep_damaged);
}

absl::Status WriteMetaCheckpoint(const std::string& directory,
                                 const std::vector<std::string>& names,
                                 const MetaTensorProducer& produce, const json& params) {
  const std::string path = absl::StrCat(directory, "/", kWeightsFile);
  TITAN_ASSIGN_OR_RETURN(AtomicFileWriter file, AtomicFileWriter::Create(path));
  absl::Status write_status;
  // Reports every write as complete: a short count makes the zip writer throw, and its destructor
  // would throw again while unwinding. The first error is kept and checked after each record.
  const auto write_bytes = [&](const void* data, size_t size) -> size_t {
    if (write_status.ok()) write_status = file.Write({static_cast<const char*>(data), size});
    return size;
  };
  absl::Status status = [&]() -> absl::Status {
    try {
      caffe2::serialize::PyTorchStreamWriter zip(write_bytes);
      // Tensors stream into data/<i> one at a time; the pickle then describes them through
      // placeholders of the same dtype and shape whose storages hold no memory.
      c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
      absl::flat_hash_map<const void*, std::string> storage_keys;
      for (size_t i = 0; i < names.size(); ++i) {
        absl::StatusOr<at::Tensor> produced = produce(i);
        if (!produced.ok()) return produced.status();
        const at::Tensor tensor = produced->contiguous();
        const std::string key = std::to_string(i);
        zip.writeRecord(kTorchSaveStoragePrefix + key, tensor.data_ptr(), tensor.nbytes());
        c10::Storage storage(c10::Storage::use_byte_size_t(), tensor.nbytes(),
                             c10::DataPtr(nullptr, at::Device(at::kCPU)), /*allocator=*/nullptr,
                             /*resizable=*/false);
        storage_keys[storage.unsafeGetStorageImpl()] = key;
        dict.insert(
            names[i],
            at::empty({0}, tensor.options()).set_(storage, 0, tensor.sizes(), tensor.strides()));
        if (!write_status.ok()) return write_status;
      }
      std::vector<char> pickle;
      // No type tags: torch.jit's restore_type_tag is not on torch.load's weights_only allowlist.
      torch::jit::Pickler pickler(
          [&](const char* data, size_t size) { pickle.insert(pickle.end(), data, data + size); },
          /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
          [&](const at::Tensor& tensor) {
            return storage_keys.at(tensor.storage().unsafeGetStorageImpl());
          },
          /*tag_aggregates=*/false);
      pickler.protocol();
      pickler.pushIValue(c10::IValue(dict));
      pickler.stop();
      zip.writeRecord("data.pkl", pickle.data(), pickle.size());
      zip.writeRecord("byteorder", "little", 6);
      zip.writeEndOfFile();
      if (!write_status.ok()) return write_status;
    } catch (const c10::Error& e) {
      if (!write_status.ok()) return write_status;
      return absl::InternalError(absl::StrCat(path, ": ", e.what_without_backtrace()));
    }
    return write_status;
  }();
  TITAN_RETURN_IF_ERROR(status);
  TITAN_RETURN_IF_ERROR(file.Commit());
  return WriteFileAtomically(absl::StrCat(directory, "/", kParamsFile), params.dump(2) + "\n");
}

absl::Status WriteMetaCheckpoint(const std::string& directory, const NamedTensors& tensors,
                                 const json& params) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors) names.push_back(name);
  return WriteMetaCheckpoint(
      directory, names, [&](size_t i) -> absl::StatusOr<at::Tensor> { return tensors[i].second; },
      params);
}

}  // namespace titan
