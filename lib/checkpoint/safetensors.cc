#include "lib/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/util/file_util.h"
#include "lib/util/mapped_file.h"
#include "lib/util/short_text.h"
#include "nlohmann/json.hpp"

namespace titan {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; a big-endian host would need byte swaps");

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

namespace {

using nlohmann::json;

struct DtypeInfo {
  const char* name;
  at::ScalarType type;
};

// In the order of the reference's Dtype enum: the writer lays out higher ranks first (wider
// alignment first), which is what keeps our files byte-identical to the reference's.
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", at::kBool},
    {"U8", at::kByte},
    {"I8", at::kChar},
    {"F8_E5M2", at::kFloat8_e5m2},
    {"F8_E4M3", at::kFloat8_e4m3fn},
    {"F8_E4M3FNUZ", at::kFloat8_e4m3fnuz},
    {"F8_E5M2FNUZ", at::kFloat8_e5m2fnuz},
    {"I16", at::kShort},
    {"U16", at::kUInt16},
    {"F16", at::kHalf},
    {"BF16", at::kBFloat16},
    {"I32", at::kInt},
    {"U32", at::kUInt32},
    {"F32", at::kFloat},
    {"C64", at::kComplexFloat},
    {"F64", at::kDouble},
    {"I64", at::kLong},
    {"U64", at::kUInt64},
};

int DtypeRank(at::ScalarType type) {
  for (int i = 0; i < static_cast<int>(std::size(kDtypes)); ++i) {
    if (kDtypes[i].type == type) return i;
  }
  return -1;
}

std::string KnownDtypes() {
  std::vector<std::string> names;
  for (const DtypeInfo& info : kDtypes) names.push_back(info.name);
  return absl::StrJoin(names, ", ");
}

// Element count times element size, or nullopt on uint64 overflow (hostile shapes).
std::optional<uint64_t> ByteSize(const std::vector<int64_t>& shape, uint64_t item_size) {
  uint64_t bytes = item_size;
  for (int64_t dim : shape) {
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes)) return std::nullopt;
  }
  return bytes;
}

// A non-negative JSON integer that fits int64 (nlohmann parses non-negative literals as unsigned).
std::optional<uint64_t> AsNonNegativeInt(const json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  const uint64_t v = value.get<uint64_t>();
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return v;
}

absl::Status Malformed(absl::string_view source, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": invalid safetensors file: ", what));
}

absl::StatusOr<SafetensorsEntry> ParseEntry(absl::string_view source, const std::string& name,
                                            const json& value, uint64_t data_size) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!value.is_object()) {
    return Malformed(source,
                     absl::StrCat(where, ": expected an object, got ", JsonForMessage(value)));
  }
  for (const auto& [key, unused] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Malformed(source, absl::StrCat(where, ": unexpected key '", key,
                                            "' (expected dtype, shape, data_offsets)"));
    }
  }
  SafetensorsEntry entry;
  entry.name = name;

  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    return Malformed(source, absl::StrCat(where, ": missing string 'dtype'"));
  }
  entry.dtype = dtype->get<std::string>();
  absl::StatusOr<at::ScalarType> type = ScalarTypeFromSafetensorsDtype(entry.dtype);
  if (!type.ok()) return Malformed(source, absl::StrCat(where, ": ", type.status().message()));
  entry.scalar_type = *type;

  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    return Malformed(source, absl::StrCat(where, ": missing array 'shape'"));
  }
  for (const json& dim : *shape) {
    std::optional<uint64_t> size = AsNonNegativeInt(dim);
    if (!size) {
      return Malformed(source,
                       absl::StrCat(where, ": 'shape': expected non-negative integers, got ",
                                    JsonForMessage(*shape)));
    }
    entry.shape.push_back(static_cast<int64_t>(*size));
  }

  auto offsets = value.find("data_offsets");
  std::optional<uint64_t> begin, end;
  if (offsets != value.end() && offsets->is_array() && offsets->size() == 2) {
    begin = AsNonNegativeInt((*offsets)[0]);
    end = AsNonNegativeInt((*offsets)[1]);
  }
  if (!begin || !end) {
    return Malformed(
        source,
        absl::StrCat(where, ": expected 'data_offsets' [begin, end] of non-negative ",
                     "integers, got ", offsets == value.end() ? "none" : JsonForMessage(*offsets)));
  }
  entry.begin = *begin;
  entry.end = *end;
  const std::string range = absl::StrCat("[", entry.begin, ", ", entry.end, "]");
  if (entry.end < entry.begin) {
    return Malformed(source, absl::StrCat(where, ": data_offsets ", range, " end before begin"));
  }
  if (entry.end > data_size) {
    return Malformed(source, absl::StrCat(where, ": data_offsets ", range,
                                          " run past the data section of ", data_size, " bytes"));
  }
  std::optional<uint64_t> bytes = ByteSize(entry.shape, c10::elementSize(entry.scalar_type));
  const std::string shape_text = absl::StrCat("[", absl::StrJoin(entry.shape, ","), "]");
  if (!bytes) return Malformed(source, absl::StrCat(where, ": shape ", shape_text, " overflows"));
  if (*bytes != entry.end - entry.begin) {
    return Malformed(source, absl::StrCat(where, ": data_offsets ", range, " hold ",
                                          entry.end - entry.begin, " bytes, but ", entry.dtype,
                                          " shape ", shape_text, " needs ", *bytes));
  }
  return entry;
}

absl::Status ParseMetadata(absl::string_view source, const json& value,
                           std::map<std::string, std::string>& metadata) {
  if (!value.is_object()) {
    return Malformed(source, absl::StrCat("__metadata__: expected an object of strings, got ",
                                          JsonForMessage(value)));
  }
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return Malformed(source, absl::StrCat("__metadata__: '", key, "': expected a string, got ",
                                            JsonForMessage(item)));
    }
    metadata[key] = item.get<std::string>();
  }
  return absl::OkStatus();
}

// The entries sorted by offset must tile [0, data_size) with no gap and no overlap.
absl::Status CheckTiling(absl::string_view source, std::vector<SafetensorsEntry>& entries,
                         uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& entry : entries) {
    if (entry.begin < covered) {
      return Malformed(source, absl::StrCat("tensor '", entry.name, "' data_offsets [", entry.begin,
                                            ", ", entry.end, "] overlap tensor '", previous->name,
                                            "' [", previous->begin, ", ", previous->end, "]"));
    }
    if (entry.begin > covered) {
      return Malformed(source, absl::StrCat("gap: bytes [", covered, ", ", entry.begin,
                                            ") of the data section belong to no tensor (before '",
                                            entry.name, "')"));
    }
    covered = entry.end;
    previous = &entry;
  }
  if (covered != data_size) {
    return Malformed(source, absl::StrCat("tensors cover ", covered, " bytes but the data section ",
                                          "after the header has ", data_size));
  }
  return absl::OkStatus();
}

// The header bytes (length field + padded JSON) for tensors laid out in `order`.
absl::StatusOr<std::string> BuildHeader(const std::string& path, const NamedTensors& tensors,
                                        const std::vector<size_t>& order,
                                        const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps our insertion order: "__metadata__" first, then tensors in data order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i : order) {
    const at::Tensor& tensor = tensors[i].second;
    const uint64_t bytes = static_cast<uint64_t>(tensor.numel()) * tensor.element_size();
    header[tensors[i].first] = {
        {"dtype", *SafetensorsDtypeName(tensor.scalar_type())},
        {"shape", tensor.sizes().vec()},
        {"data_offsets", {offset, offset + bytes}},
    };
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor names and metadata must be valid UTF-8: ", e.what()));
  }
  // Like the reference: pad with spaces so the data section starts 8-byte aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t length = text.size();
  std::string out(reinterpret_cast<const char*>(&length), sizeof(length));
  return out + text;
}

}  // namespace

absl::StatusOr<std::string> SafetensorsDtypeName(at::ScalarType type) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.type == type) return std::string(info.name);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dtype ", c10::toString(type), " has no safetensors equivalent here"));
}

absl::StatusOr<at::ScalarType> ScalarTypeFromSafetensorsDtype(absl::string_view dtype) {
  for (const DtypeInfo& info : kDtypes) {
    if (dtype == info.name) return info.type;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", dtype, "\" (expected one of ", KnownDtypes(), ")"));
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view file_bytes,
                                                         absl::string_view source) {
  if (file_bytes.size() < 8) {
    return Malformed(source, absl::StrCat("file is ", file_bytes.size(),
                                          " bytes, shorter than the 8-byte header length field"));
  }
  uint64_t header_length;
  std::memcpy(&header_length, file_bytes.data(), sizeof(header_length));
  if (header_length > kSafetensorsMaxHeaderBytes) {
    return Malformed(source, absl::StrCat("header length ", header_length, " exceeds the limit of ",
                                          kSafetensorsMaxHeaderBytes, " bytes"));
  }
  if (header_length > file_bytes.size() - 8) {
    return Malformed(
        source, absl::StrCat("header length ", header_length, " runs past the end of the file (",
                             file_bytes.size(), " bytes)"));
  }
  const absl::string_view text = file_bytes.substr(8, header_length);
  if (text.empty() || text.front() != '{') {
    return Malformed(source, "header JSON must start with '{'");
  }

  // nlohmann keeps the last of duplicate keys; a duplicated tensor name is an error here.
  std::string duplicate;
  std::set<std::string> seen;
  auto note_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), note_duplicates);
  } catch (const json::exception& e) {
    return Malformed(source, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) {
    return Malformed(source, absl::StrCat("header names '", duplicate, "' more than once"));
  }
  if (!header.is_object()) return Malformed(source, "header JSON is not an object");

  SafetensorsHeader result;
  result.data_start = 8 + header_length;
  const uint64_t data_size = file_bytes.size() - result.data_start;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      absl::Status status = ParseMetadata(source, value, result.metadata);
      if (!status.ok()) return status;
      continue;
    }
    absl::StatusOr<SafetensorsEntry> entry = ParseEntry(source, name, value, data_size);
    if (!entry.ok()) return entry.status();
    result.entries.push_back(*std::move(entry));
  }
  absl::Status tiling = CheckTiling(source, result.entries, data_size);
  if (!tiling.ok()) return tiling;
  return result;
}

absl::Status WriteSafetensors(const std::string& path, const NamedTensors& tensors,
                              const std::map<std::string, std::string>& metadata,
                              const TensorBytesObserver& observer) {
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    const std::string where = absl::StrCat(path, ": tensor '", name, "'");
    if (name == "__metadata__") return absl::InvalidArgumentError(where + ": reserved name");
    if (!names.insert(name).second) return absl::InvalidArgumentError(where + ": duplicate name");
    if (!tensor.defined()) return absl::InvalidArgumentError(where + ": undefined tensor");
    if (tensor.layout() != at::kStrided || tensor.is_meta()) {
      return absl::InvalidArgumentError(where + ": only dense tensors with data can be saved");
    }
    absl::StatusOr<std::string> dtype = SafetensorsDtypeName(tensor.scalar_type());
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", dtype.status().message()));
    }
  }
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int rank_a = DtypeRank(tensors[a].second.scalar_type());
    const int rank_b = DtypeRank(tensors[b].second.scalar_type());
    if (rank_a != rank_b) return rank_a > rank_b;
    return tensors[a].first < tensors[b].first;
  });
  absl::StatusOr<std::string> header = BuildHeader(path, tensors, order, metadata);
  if (!header.ok()) return header.status();

  absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(path);
  if (!file.ok()) return file.status();
  absl::Status status = file->Write(*header);
  if (!status.ok()) return status;
  for (size_t i : order) {
    const auto& [name, tensor] = tensors[i];
    at::Tensor host;
    try {
      host = tensor.to(at::kCPU).contiguous();  // One tensor's copy at a time, none when on CPU.
    } catch (const c10::Error& e) {
      return absl::InternalError(absl::StrCat(path, ": tensor '", name,
                                              "': copy to CPU failed: ", e.what_without_backtrace()));
    }
    const absl::string_view bytes(static_cast<const char*>(host.data_ptr()), host.nbytes());
    status = file->Write(bytes);
    if (!status.ok()) return status;
    if (observer) {
      status = observer(name, bytes);
      if (!status.ok()) return status;
    }
  }
  return file->Commit();
}

at::Tensor TensorOverBytes(absl::string_view bytes, at::ScalarType type,
                           const std::vector<int64_t>& shape) {
  const auto options = at::TensorOptions().dtype(type);
  if (reinterpret_cast<uintptr_t>(bytes.data()) % c10::elementSize(type) == 0) {
    return at::from_blob(const_cast<char*>(bytes.data()), shape, options);
  }
  at::Tensor copy = at::empty(shape, options);
  if (!bytes.empty()) std::memcpy(copy.data_ptr(), bytes.data(), bytes.size());
  return copy;
}

SafetensorsFile::SafetensorsFile(std::string path, std::shared_ptr<const MappedFile> mapping,
                                 SafetensorsHeader header)
    : path_(std::move(path)), mapping_(std::move(mapping)), header_(std::move(header)) {
  for (size_t i = 0; i < header_.entries.size(); ++i) index_[header_.entries[i].name] = i;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&&) = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) = default;
SafetensorsFile::~SafetensorsFile() = default;

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  absl::StatusOr<std::shared_ptr<const MappedFile>> mapping = MappedFile::Open(path);
  if (!mapping.ok()) return mapping.status();
  absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader((*mapping)->bytes(), path);
  if (!header.ok()) return header.status();
  return SafetensorsFile(path, *std::move(mapping), *std::move(header));
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const SafetensorsEntry& entry : header_.entries) names.push_back(entry.name);
  return names;
}

const SafetensorsEntry* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.entries[it->second];
}

absl::StatusOr<absl::string_view> SafetensorsFile::Bytes(absl::string_view name) const {
  const SafetensorsEntry* entry = Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  return mapping_->bytes().substr(header_.data_start + entry->begin, entry->end - entry->begin);
}

absl::StatusOr<at::Tensor> SafetensorsFile::Load(absl::string_view name) const {
  absl::StatusOr<absl::string_view> bytes = Bytes(name);
  if (!bytes.ok()) return bytes.status();
  const SafetensorsEntry& entry = *Find(name);
  try {
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions().dtype(entry.scalar_type));
    // Copied rather than wrapped with from_blob: the mapping may be unaligned for the dtype.
    if (!bytes->empty()) std::memcpy(tensor.data_ptr(), bytes->data(), bytes->size());
    return tensor;
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(absl::StrCat(
        path_, ": tensor '", name, "': allocation failed: ", e.what_without_backtrace()));
  }
}

absl::Status SafetensorsFile::LoadInto(absl::string_view name,
                                       const at::Tensor& destination) const {
  const SafetensorsEntry* entry = Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat(path_, ": no tensor named '", name, "'"));
  }
  if (!destination.defined() || destination.sizes().vec() != entry->shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": tensor '", name, "': shape ", ShapeString(entry->shape),
        " in the file, destination has ",
        destination.defined() ? ShapeString(destination.sizes().vec()) : "no tensor"));
  }
  try {
    if (destination.device().is_cpu() && destination.is_contiguous() &&
        destination.scalar_type() == entry->scalar_type) {
      absl::StatusOr<absl::string_view> bytes = Bytes(name);
      if (!bytes->empty()) std::memcpy(destination.data_ptr(), bytes->data(), bytes->size());
      return absl::OkStatus();
    }
    absl::StatusOr<at::Tensor> loaded = Load(name);
    if (!loaded.ok()) return loaded.status();
    destination.copy_(*loaded);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(path_, ": tensor '", name, "': copy failed: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

}  // namespace titan
