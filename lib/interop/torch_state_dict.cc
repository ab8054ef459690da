#include "lib/interop/torch_state_dict.h"

#include <ATen/EmptyTensor.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <torch/csrc/jit/serialization/unpickler.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/interop/ordered_dict_pickle.h"
#include "lib/interop/torch_archive_checks.h"
#include "lib/util/file_util.h"
#include "lib/util/mapped_file.h"

namespace titan {
namespace {

// LibTorch's MemoryReadAdapter copies whatever range the zip reader asks for; this one clamps reads
// to the buffer, as a file read past its end would.
class BoundedMemoryReadAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedMemoryReadAdapter(absl::string_view bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    const size_t count = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, count);
    return count;
  }

 private:
  absl::string_view bytes_;
};

// A file's mapping, which tensors over it hold through shared_ptr.
using Mapping = const MappedFile;

absl::Status NotAStateDict(const std::string& source, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": not a torch.save state dict of tensors: ", why));
}

// torch.save before PyTorch 1.6: a pickle starting with its magic number, or a tar archive.
bool IsLegacyTorchSave(absl::string_view bytes) {
  constexpr absl::string_view kLegacyMagic(
      "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14);
  return absl::StartsWith(bytes, kLegacyMagic) ||
         (bytes.size() >= 262 && bytes.substr(257, 5) == "ustar");
}

// The storage record `record` as a storage aliasing `mapping` where torch.save wrote it (stored
// uncompressed, 64-byte aligned, inside the file); nullopt where it must be copied out.
std::optional<c10::Storage> AliasRecord(caffe2::serialize::PyTorchStreamReader& zip,
                                        const std::string& record,
                                        const std::shared_ptr<Mapping>& mapping) {
  const absl::string_view file = mapping->bytes();
  const size_t header = zip.getRecordHeaderOffset(record);
  const size_t offset = zip.getRecordOffset(record);
  const size_t size = zip.getRecordSize(record);
  constexpr size_t kMethodAt = 8, kStored = 0, kAlignment = 64;
  if (header > file.size() || file.size() - header < kMethodAt + 2 ||
      (static_cast<uint8_t>(file[header + kMethodAt]) |
       static_cast<uint8_t>(file[header + kMethodAt + 1]) << 8) != kStored ||
      offset > file.size() || size > file.size() - offset || offset % kAlignment != 0) {
    return std::nullopt;
  }
  auto* owner = new std::shared_ptr<Mapping>(mapping);
  void* data = const_cast<char*>(file.data() + offset);
  return c10::Storage(
      c10::Storage::use_byte_size_t(), size,
      c10::DataPtr(
          data, owner,
          [](void* context) { delete static_cast<std::shared_ptr<Mapping>*>(context); },
          at::Device(at::kCPU)),
      /*allocator=*/nullptr, /*resizable=*/false);
}

// A torch.save archive's "data.pkl" through LibTorch's restricted unpickler, as name -> tensor.
// `mapping`: the archive's bytes are that file's, and storages alias it where they can.
absl::StatusOr<NamedTensors> ReadStateDict(
    std::shared_ptr<caffe2::serialize::ReadAdapterInterface> archive, const std::string& source,
    const std::shared_ptr<Mapping>& mapping = nullptr) {
  c10::IValue loaded;
  try {
    std::string head(14 + 262, '\0');
    head.resize(archive->read(0, head.data(), head.size(), "checking the format"));
    if (IsLegacyTorchSave(head)) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": torch.save's legacy format (PyTorch before 1.6, not a zip archive), which ",
          "titan does not read: save it again with a newer torch.save, or as safetensors"));
    }
    const absl::Status sizes = CheckZipRecordSizes(*archive);
    if (!sizes.ok()) return NotAStateDict(source, sizes.message());
    caffe2::serialize::PyTorchStreamReader zip(std::move(archive));
    const auto [pickle, pickle_size] = zip.getRecord("data.pkl");
    const absl::string_view pickle_bytes(static_cast<const char*>(pickle.get()), pickle_size);
    const absl::Status opcodes = CheckStateDictPickle(pickle_bytes);
    if (!opcodes.ok()) return NotAStateDict(source, opcodes.message());
    const absl::StatusOr<std::string> plain = PlainDictPickle(pickle_bytes);
    if (!plain.ok()) return NotAStateDict(source, plain.status().message());
    // The unpickler sizes a storage from the pickle's element count, not from the record it
    // reads, so a short record would be read past its end: storages come sized by their records.
    auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
    for (const std::string& record : zip.getAllRecords()) {
      if (!absl::StartsWith(record, kTorchSaveStoragePrefix)) continue;
      const std::string key = record.substr(std::strlen(kTorchSaveStoragePrefix));
      std::optional<c10::Storage> aliased;
      if (mapping != nullptr) aliased = AliasRecord(zip, record, mapping);
      if (aliased.has_value()) {
        storages->addStorage(key, *std::move(aliased));
        continue;
      }
      auto [data, bytes] = zip.getRecord(record);
      storages->addStorage(key, c10::Storage(c10::Storage::use_byte_size_t(), bytes,
                                             std::move(data), /*allocator=*/nullptr,
                                             /*resizable=*/false));
    }
    // torch::jit::readArchiveAndTensors, over the rewritten pickle rather than data.pkl's bytes.
    size_t unpickled = 0;
    torch::jit::Unpickler unpickler(
        [&](char* buffer, size_t n) {
          n = std::min(n, plain->size() - unpickled);
          std::memcpy(buffer, plain->data() + unpickled, n);
          unpickled += n;
          return n;
        },
        /*type_resolver=*/nullptr, /*obj_loader=*/nullptr,
        [&](const std::string& key) {
          return std::get<0>(zip.getRecord(absl::StrCat(kTorchSaveStoragePrefix, key)));
        },
        at::Device(at::kCPU), /*use_storage_device=*/false,
        torch::jit::Unpickler::defaultTypeParser, std::move(storages));
    unpickler.set_version(zip.version());
    loaded = unpickler.parse_ivalue();
  } catch (const c10::Error& e) {
    return NotAStateDict(source, e.what_without_backtrace());
  } catch (const std::exception& e) {  // miniz and the unpickler also throw std:: exceptions.
    return NotAStateDict(source, e.what());
  }
  if (!loaded.isGenericDict()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a dict of tensors, got ", loaded.tagKind()));
  }
  NamedTensors tensors;
  for (const auto& item : loaded.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": entry of type ", item.key().tagKind(), " -> ",
                       item.value().tagKind(), ", expected string -> tensor"));
    }
    const std::string name = item.key().toStringRef();
    const at::Tensor& loaded_tensor = item.value().toTensor();
    // The unpickler takes sizes, strides and offset from the pickle as they are; a view reaching
    // past its storage's bytes would read out of bounds.
    size_t needed = 0;
    try {
      needed = at::detail::computeStorageNbytes(loaded_tensor.sizes(), loaded_tensor.strides(),
                                                loaded_tensor.element_size(),
                                                loaded_tensor.storage_offset());
    } catch (const c10::Error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": tensor '", name, "': ", e.what_without_backtrace()));
    }
    if (!loaded_tensor.has_storage() || needed > loaded_tensor.storage().nbytes()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": tensor '", name, "' needs ", needed, " bytes, its storage holds ",
                       loaded_tensor.has_storage() ? loaded_tensor.storage().nbytes() : 0));
    }
    const at::Tensor tensor = loaded_tensor.contiguous();
    absl::StatusOr<std::string> dtype = SafetensorsDtypeName(tensor.scalar_type());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": tensor '", name, "': ", dtype.status().message()));
    }
    tensors.emplace_back(name, tensor);
  }
  return tensors;
}

}  // namespace

absl::StatusOr<NamedTensors> ParseTorchStateDict(absl::string_view archive,
                                                 const std::string& source) {
  return ReadStateDict(std::make_shared<BoundedMemoryReadAdapter>(archive), source);
}

absl::StatusOr<NamedTensors> ReadTorchStateDictFile(const std::string& path) {
  absl::StatusOr<std::shared_ptr<Mapping>> mapping = MappedFile::Open(path);
  if (!mapping.ok()) return mapping.status();
  return ReadStateDict(std::make_shared<BoundedMemoryReadAdapter>((*mapping)->bytes()), path,
                       *mapping);
}

}  // namespace titan
