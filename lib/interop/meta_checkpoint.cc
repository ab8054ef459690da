#include "lib/interop/meta_checkpoint.h"

#include <ATen/EmptyTensor.h>
#include <caffe2/serialize/file_adapter.h>
#include <caffe2/serialize/inline_container.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <fcntl.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "lib/checkpoint/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using nlohmann::json;

constexpr char kParamsFile[] = "params.json";
constexpr char kWeightsFile[] = "consolidated.00.pth";
constexpr char kStoragePrefix[] = "data/";  // torch.save's storage records: data/<key>.

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

// How a pickle opcode's argument follows the opcode byte.
enum class PickleArg {
  kNone,
  kFixed,    // `size` bytes.
  kCounted,  // A `size`-byte little-endian length, then that many bytes.
  kFrame,    // FRAME: an 8-byte length of the opcodes that follow (walked, not skipped).
  kLines,    // `size` newline-terminated lines.
};

struct PickleOpcode {
  uint8_t code;
  const char* name;
  PickleArg arg;
  int size;
  bool in_state_dicts;  // torch.save (protocol 2) writes it for a dict of tensors.
};

// Every opcode of pickle protocols 0-5 (as Python's pickletools lists them), so that a length
// field is checked whichever opcode carries it.
constexpr PickleOpcode kPickleOpcodes[] = {
    {'(', "MARK", PickleArg::kNone, 0, true},
    {'.', "STOP", PickleArg::kNone, 0, true},
    {'0', "POP", PickleArg::kNone, 0, false},
    {'1', "POP_MARK", PickleArg::kNone, 0, false},
    {'2', "DUP", PickleArg::kNone, 0, false},
    {'F', "FLOAT", PickleArg::kLines, 1, false},
    {'I', "INT", PickleArg::kLines, 1, false},
    {'J', "BININT", PickleArg::kFixed, 4, true},
    {'K', "BININT1", PickleArg::kFixed, 1, true},
    {'L', "LONG", PickleArg::kLines, 1, false},
    {'M', "BININT2", PickleArg::kFixed, 2, true},
    {'N', "NONE", PickleArg::kNone, 0, true},
    {'P', "PERSID", PickleArg::kLines, 1, false},
    {'Q', "BINPERSID", PickleArg::kNone, 0, true},
    {'R', "REDUCE", PickleArg::kNone, 0, true},
    {'S', "STRING", PickleArg::kLines, 1, false},
    {'T', "BINSTRING", PickleArg::kCounted, 4, false},
    {'U', "SHORT_BINSTRING", PickleArg::kCounted, 1, false},
    {'V', "UNICODE", PickleArg::kLines, 1, false},
    {'X', "BINUNICODE", PickleArg::kCounted, 4, true},
    {'a', "APPEND", PickleArg::kNone, 0, false},
    {'b', "BUILD", PickleArg::kNone, 0, true},
    {'c', "GLOBAL", PickleArg::kLines, 2, true},
    {'d', "DICT", PickleArg::kNone, 0, true},
    {'}', "EMPTY_DICT", PickleArg::kNone, 0, true},
    {'e', "APPENDS", PickleArg::kNone, 0, true},
    {'g', "GET", PickleArg::kLines, 1, false},
    {'h', "BINGET", PickleArg::kFixed, 1, true},
    {'i', "INST", PickleArg::kLines, 2, false},
    {'j', "LONG_BINGET", PickleArg::kFixed, 4, true},
    {'l', "LIST", PickleArg::kNone, 0, true},
    {']', "EMPTY_LIST", PickleArg::kNone, 0, true},
    {'o', "OBJ", PickleArg::kNone, 0, false},
    {'p', "PUT", PickleArg::kLines, 1, false},
    {'q', "BINPUT", PickleArg::kFixed, 1, true},
    {'r', "LONG_BINPUT", PickleArg::kFixed, 4, true},
    {'s', "SETITEM", PickleArg::kNone, 0, true},
    {'t', "TUPLE", PickleArg::kNone, 0, true},
    {')', "EMPTY_TUPLE", PickleArg::kNone, 0, true},
    {'u', "SETITEMS", PickleArg::kNone, 0, true},
    {'G', "BINFLOAT", PickleArg::kFixed, 8, true},
    {0x80, "PROTO", PickleArg::kFixed, 1, true},
    {0x81, "NEWOBJ", PickleArg::kNone, 0, false},
    {0x82, "EXT1", PickleArg::kFixed, 1, false},
    {0x83, "EXT2", PickleArg::kFixed, 2, false},
    {0x84, "EXT4", PickleArg::kFixed, 4, false},
    {0x85, "TUPLE1", PickleArg::kNone, 0, true},
    {0x86, "TUPLE2", PickleArg::kNone, 0, true},
    {0x87, "TUPLE3", PickleArg::kNone, 0, true},
    {0x88, "NEWTRUE", PickleArg::kNone, 0, true},
    {0x89, "NEWFALSE", PickleArg::kNone, 0, true},
    {0x8a, "LONG1", PickleArg::kCounted, 1, true},
    {0x8b, "LONG4", PickleArg::kCounted, 4, false},
    {'B', "BINBYTES", PickleArg::kCounted, 4, false},
    {'C', "SHORT_BINBYTES", PickleArg::kCounted, 1, false},
    {0x8c, "SHORT_BINUNICODE", PickleArg::kCounted, 1, false},
    {0x8d, "BINUNICODE8", PickleArg::kCounted, 8, false},
    {0x8e, "BINBYTES8", PickleArg::kCounted, 8, false},
    {0x8f, "EMPTY_SET", PickleArg::kNone, 0, false},
    {0x90, "ADDITEMS", PickleArg::kNone, 0, false},
    {0x91, "FROZENSET", PickleArg::kNone, 0, false},
    {0x92, "NEWOBJ_EX", PickleArg::kNone, 0, false},
    {0x93, "STACK_GLOBAL", PickleArg::kNone, 0, false},
    {0x94, "MEMOIZE", PickleArg::kNone, 0, false},
    {0x95, "FRAME", PickleArg::kFrame, 8, false},
    {0x96, "BYTEARRAY8", PickleArg::kCounted, 8, false},
    {0x97, "NEXT_BUFFER", PickleArg::kNone, 0, false},
    {0x98, "READONLY_BUFFER", PickleArg::kNone, 0, false},
};

const PickleOpcode* FindPickleOpcode(uint8_t code) {
  for (const PickleOpcode& opcode : kPickleOpcodes) {
    if (opcode.code == code) return &opcode;
  }
  return nullptr;
}

uint64_t ReadLittleEndian(absl::string_view bytes) {
  uint64_t value = 0;
  for (size_t i = bytes.size(); i > 0; --i) {
    value = (value << 8) | static_cast<uint8_t>(bytes[i - 1]);
  }
  return value;
}

// The globals a dict of tensors needs: tensor rebuilding, storage types, and OrderedDict (a
// tensor's empty backward hooks; state_dict()'s own type).
bool IsStateDictGlobal(absl::string_view module, absl::string_view name) {
  return (module == "torch._utils" && name == "_rebuild_tensor_v2") ||
         (module == "collections" && name == "OrderedDict") ||
         (module == "torch" && absl::EndsWith(name, "Storage"));
}

// Walks a torch.save pickle before LibTorch's unpickler runs it: that unpickler allocates whatever
// a length field or memo index claims before reading on (a 1 KB file can ask for 4 GB), and it
// accepts opcodes and globals a dict of tensors never needs. Hand-written: no C++ pickle library
// is at hand, and LibTorch's own parser is the one being guarded.
absl::Status CheckStateDictPickle(absl::string_view pickle) {
  uint64_t memo_size = 0;  // Picklers number memo entries 0, 1, 2 ... in the order they write them.
  size_t pos = 0;
  while (pos < pickle.size()) {
    const size_t start = pos;
    const uint8_t code = static_cast<uint8_t>(pickle[pos++]);
    const PickleOpcode* opcode = FindPickleOpcode(code);
    if (opcode == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("data.pkl: byte ", start,
                                                     ": unknown pickle opcode 0x",
                                                     absl::Hex(code, absl::kZeroPad2)));
    }
    const std::string where = absl::StrCat("data.pkl: byte ", start, ": ", opcode->name);
    absl::string_view argument;
    absl::string_view lines[2];
    const size_t left = pickle.size() - pos;
    switch (opcode->arg) {
      case PickleArg::kNone:
        break;
      case PickleArg::kFixed:
      case PickleArg::kFrame:
        if (static_cast<size_t>(opcode->size) > left) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": needs ", opcode->size, " argument bytes, ", left, " left"));
        }
        argument = pickle.substr(pos, opcode->size);
        pos += opcode->size;
        if (opcode->arg == PickleArg::kFrame && ReadLittleEndian(argument) > pickle.size() - pos) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": claims ",
                                                         ReadLittleEndian(argument), " bytes, ",
                                                         pickle.size() - pos, " left"));
        }
        break;
      case PickleArg::kCounted: {
        if (static_cast<size_t>(opcode->size) > left) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": needs a ", opcode->size,
                                                         "-byte length, ", left, " bytes left"));
        }
        const uint64_t length = ReadLittleEndian(pickle.substr(pos, opcode->size));
        pos += opcode->size;
        if (length > pickle.size() - pos) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": claims ", length, " bytes, ", pickle.size() - pos, " left"));
        }
        argument = pickle.substr(pos, length);
        pos += length;
        break;
      }
      case PickleArg::kLines:
        for (int i = 0; i < opcode->size; ++i) {
          const size_t newline = pickle.find('\n', pos);
          if (newline == absl::string_view::npos) {
            return absl::InvalidArgumentError(absl::StrCat(where, ": no newline before the end"));
          }
          lines[i] = pickle.substr(pos, newline - pos);
          pos = newline + 1;
        }
        break;
    }
    if (!opcode->in_state_dicts) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not an opcode torch.save writes for a dict of tensors"));
    }
    if (code == 'c' && !IsStateDictGlobal(lines[0], lines[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " ", lines[0], ".", lines[1],
                       ": expected a global of a dict of tensors (torch._utils._rebuild_tensor_v2, "
                       "torch.*Storage, collections.OrderedDict)"));
    }
    if (code == 'q' || code == 'r') {  // BINPUT, LONG_BINPUT: the unpickler grows its memo to fit.
      const uint64_t index = ReadLittleEndian(argument);
      if (index > memo_size) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": memo index ", index,
                                                       ", expected at most ", memo_size,
                                                       " (the next free one)"));
      }
      if (index == memo_size) ++memo_size;
    }
    if (code == '.') return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("data.pkl: ", pickle.size(), " bytes without a STOP opcode"));
}

// LibTorch's zip reader (its bundled miniz) allocates the uncompressed size a record's directory
// entry claims before extracting it, and opening the archive already reads .data/version and
// .data/serialization_id. torch.save stores records uncompressed, so no record is larger than the
// archive: every entry's claim is checked before LibTorch opens it. Hand-written: LibTorch ships
// miniz without its header, and no other zip library is at hand. Structural damage is left to
// the zip reader, which reports it.
absl::Status CheckZipRecordSizes(const caffe2::serialize::ReadAdapterInterface& archive) {
  const uint64_t size = archive.size();
  const auto read = [&](uint64_t pos, size_t n) {
    std::string bytes(n, '\0');
    bytes.resize(archive.read(pos, bytes.data(), n, "checking the zip directory"));
    return bytes;
  };
  constexpr size_t kEndRecordSize = 22, kMaxCommentSize = 0xffff;
  if (size < kEndRecordSize) return absl::OkStatus();
  // The end-of-central-directory record: the last signature with room for the record after it,
  // searched as miniz does.
  const uint64_t tail_start = size - std::min<uint64_t>(size, kEndRecordSize + kMaxCommentSize);
  const std::string tail = read(tail_start, size - tail_start);
  const size_t end = tail.rfind("PK\5\6", tail.size() - kEndRecordSize);
  if (end == std::string::npos) return absl::OkStatus();
  uint64_t entries = ReadLittleEndian(absl::string_view(tail).substr(end + 10, 2));
  uint64_t offset = ReadLittleEndian(absl::string_view(tail).substr(end + 16, 4));
  // ZIP64 (torch.save writes it): a locator just before points at the record with the real values.
  if (end >= 20 && tail.compare(end - 20, 4, "PK\6\7") == 0) {
    const std::string zip64 =
        read(ReadLittleEndian(absl::string_view(tail).substr(end - 20 + 8, 8)), 56);
    if (zip64.size() == 56 && zip64.compare(0, 4, "PK\6\6") == 0) {
      entries = ReadLittleEndian(absl::string_view(zip64).substr(32, 8));
      offset = ReadLittleEndian(absl::string_view(zip64).substr(48, 8));
    }
  }
  for (uint64_t i = 0; i < entries; ++i) {
    const std::string header = read(offset, 46);
    if (header.size() < 46 || header.compare(0, 4, "PK\1\2") != 0) return absl::OkStatus();
    const absl::string_view fields(header);
    uint64_t claimed = ReadLittleEndian(fields.substr(24, 4));
    const uint64_t name_size = ReadLittleEndian(fields.substr(28, 2));
    const uint64_t extra_size = ReadLittleEndian(fields.substr(30, 2));
    const std::string name = read(offset + 46, name_size);
    if (claimed == 0xffffffff) {  // The ZIP64 extra field (id 1) starts with the real size.
      const std::string extra = read(offset + 46 + name_size, extra_size);
      for (size_t at = 0; at + 4 <= extra.size();
           at += 4 + ReadLittleEndian(absl::string_view(extra).substr(at + 2, 2))) {
        if (ReadLittleEndian(absl::string_view(extra).substr(at, 2)) == 1 &&
            at + 12 <= extra.size()) {
          claimed = ReadLittleEndian(absl::string_view(extra).substr(at + 4, 8));
          break;
        }
      }
    }
    if (claimed > size) {
      return absl::InvalidArgumentError(absl::StrCat("zip record ", name, " claims ", claimed,
                                                     " bytes, the archive has ", size,
                                                     " (torch.save stores records uncompressed)"));
    }
    offset += 46 + name_size + extra_size + ReadLittleEndian(fields.substr(32, 2));
  }
  return absl::OkStatus();
}

absl::Status NotAStateDict(const std::string& source, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ": not a torch.save state dict of tensors: ", why));
}

// A torch.save archive's "data.pkl" through LibTorch's restricted unpickler, as name -> tensor.
absl::StatusOr<NamedTensors> ReadStateDict(
    std::shared_ptr<caffe2::serialize::ReadAdapterInterface> archive, const std::string& source) {
  c10::IValue loaded;
  try {
    const absl::Status sizes = CheckZipRecordSizes(*archive);
    if (!sizes.ok()) return NotAStateDict(source, sizes.message());
    caffe2::serialize::PyTorchStreamReader zip(std::move(archive));
    const auto [pickle, pickle_size] = zip.getRecord("data.pkl");
    const absl::Status opcodes = CheckStateDictPickle(
        absl::string_view(static_cast<const char*>(pickle.get()), pickle_size));
    if (!opcodes.ok()) return NotAStateDict(source, opcodes.message());
    // The unpickler sizes a storage from the pickle's element count, not from the record it
    // reads, so a short record would be read past its end: storages come sized by their records.
    auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
    for (const std::string& record : zip.getAllRecords()) {
      if (!absl::StartsWith(record, kStoragePrefix)) continue;
      auto [data, bytes] = zip.getRecord(record);
      storages->addStorage(record.substr(std::strlen(kStoragePrefix)),
                           c10::Storage(c10::Storage::use_byte_size_t(), bytes, std::move(data),
                                        /*allocator=*/nullptr, /*resizable=*/false));
    }
    loaded = torch::jit::readArchiveAndTensors(
        "data", "", "", std::nullopt, std::nullopt, at::Device(at::kCPU), zip,
        torch::jit::Unpickler::defaultTypeParser, std::move(storages));
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
  std::vector<std::string> Verify() const override { return {}; }

  static absl::StatusOr<std::unique_ptr<CheckpointReader>> Open(const std::string& directory) {
    auto reader = std::unique_ptr<MetaReader>(new MetaReader());
    reader->format_ = CheckpointFormat::kMeta;
    reader->directory_ = directory;
    const std::string params_path = absl::StrCat(directory, "/", kParamsFile);
    TITAN_ASSIGN_OR_RETURN(std::string params_text, ReadFile(params_path));
    reader->description_ = json::parse(params_text, nullptr, /*allow_exceptions=*/false);
    if (!reader->description_.is_object()) {
      return absl::InvalidArgumentError(params_path + ": expected a JSON object");
    }
    if (PathExists(absl::StrCat(directory, "/consolidated.01.pth"))) {
      return absl::UnimplementedError(absl::StrCat(
          directory, ": model-parallel checkpoints (consolidated.01.pth ...) are not supported"));
    }
    const std::string path = absl::StrCat(directory, "/", kWeightsFile);
    if (!PathExists(path)) return absl::NotFoundError(path + ": no such file");
    std::shared_ptr<caffe2::serialize::ReadAdapterInterface> file;
    try {
      file = std::make_shared<caffe2::serialize::FileAdapter>(path);
    } catch (const c10::Error& e) {
      return absl::NotFoundError(absl::StrCat(path, ": ", e.what_without_backtrace()));
    }
    TITAN_ASSIGN_OR_RETURN(NamedTensors tensors, ReadStateDict(std::move(file), path));
    for (auto& [name, tensor] : tensors) {
      reader->tensors_.push_back({name, *SafetensorsDtypeName(tensor.scalar_type()),
                                  tensor.scalar_type(), tensor.sizes().vec(),
                                  static_cast<uint64_t>(tensor.nbytes()), kWeightsFile});
      reader->tensors_by_name_[name] = std::move(tensor);
    }
    return std::unique_ptr<CheckpointReader>(std::move(reader));
  }

 private:
  absl::flat_hash_map<std::string, at::Tensor> tensors_by_name_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointReader>> OpenMetaCheckpoint(const std::string& directory) {
  return MetaReader::Open(directory);
}

absl::StatusOr<NamedTensors> ParseTorchStateDict(absl::string_view archive,
                                                 const std::string& source) {
  return ReadStateDict(std::make_shared<BoundedMemoryReadAdapter>(archive), source);
}

absl::Status WriteMetaCheckpoint(const std::string& directory,
                                 const std::vector<std::string>& names,
                                 const MetaTensorProducer& produce, const json& params) {
  const std::string path = absl::StrCat(directory, "/", kWeightsFile);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return ErrnoError("open", tmp);
  absl::Status write_status;
  // Reports every write as complete: a short count makes the zip writer throw, and its destructor
  // would throw again while unwinding. The first error is kept and checked after each record.
  const auto write_bytes = [&](const void* data, size_t size) -> size_t {
    const char* next = static_cast<const char*>(data);
    for (size_t left = size; left > 0 && write_status.ok();) {
      const ssize_t written = ::write(fd, next, left);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        write_status = ErrnoError("write", tmp);
        break;
      }
      next += written;
      left -= static_cast<size_t>(written);
    }
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
        zip.writeRecord(kStoragePrefix + key, tensor.data_ptr(), tensor.nbytes());
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
    if (!write_status.ok()) return write_status;
    if (::fsync(fd) != 0) return ErrnoError("fsync", tmp);
    return absl::OkStatus();
  }();
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("close", tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) status = ErrnoError("rename", tmp);
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status;
  }
  TITAN_RETURN_IF_ERROR(FsyncDirectory(directory));
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
