#include "lib/interop/torch_archive_checks.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace titan {
namespace {

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

}  // namespace

uint64_t PickleOp::Integer() const { return ReadLittleEndian(argument); }

absl::StatusOr<PickleOp> ReadPickleOp(absl::string_view pickle, size_t pos) {
  PickleOp op;
  op.start = pos;
  op.code = static_cast<uint8_t>(pickle[pos++]);
  const PickleOpcode* opcode = FindPickleOpcode(op.code);
  if (opcode == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("data.pkl: byte ", op.start,
                                                   ": unknown pickle opcode 0x",
                                                   absl::Hex(op.code, absl::kZeroPad2)));
  }
  op.name = opcode->name;
  op.in_state_dicts = opcode->in_state_dicts;
  const std::string where = absl::StrCat("data.pkl: byte ", op.start, ": ", opcode->name);
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
      op.argument = pickle.substr(pos, opcode->size);
      pos += opcode->size;
      if (opcode->arg == PickleArg::kFrame && op.Integer() > pickle.size() - pos) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": claims ", op.Integer(), " bytes, ",
                                                       pickle.size() - pos, " left"));
      }
      break;
    case PickleArg::kCounted: {
      if (static_cast<size_t>(opcode->size) > left) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": needs a ", opcode->size, "-byte length, ", left, " bytes left"));
      }
      const uint64_t length = ReadLittleEndian(pickle.substr(pos, opcode->size));
      pos += opcode->size;
      if (length > pickle.size() - pos) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": claims ", length, " bytes, ", pickle.size() - pos, " left"));
      }
      op.argument = pickle.substr(pos, length);
      pos += length;
      break;
    }
    case PickleArg::kLines:
      for (int i = 0; i < opcode->size; ++i) {
        const size_t newline = pickle.find('\n', pos);
        if (newline == absl::string_view::npos) {
          return absl::InvalidArgumentError(absl::StrCat(where, ": no newline before the end"));
        }
        op.lines[i] = pickle.substr(pos, newline - pos);
        pos = newline + 1;
      }
      break;
  }
  op.end = pos;
  return op;
}

// Walks a torch.save pickle before LibTorch's unpickler runs it: that unpickler allocates whatever
// a length field or memo index claims before reading on (a 1 KB file can ask for 4 GB), and it
// accepts opcodes and globals a dict of tensors never needs. Hand-written: no C++ pickle library
// is at hand, and LibTorch's own parser is the one being guarded.
absl::Status CheckStateDictPickle(absl::string_view pickle) {
  uint64_t memo_size = 0;  // Picklers number memo entries 0, 1, 2 ... in the order they write them.
  size_t pos = 0;
  while (pos < pickle.size()) {
    absl::StatusOr<PickleOp> op = ReadPickleOp(pickle, pos);
    if (!op.ok()) return op.status();
    pos = op->end;
    const std::string where = absl::StrCat("data.pkl: byte ", op->start, ": ", op->name);
    if (!op->in_state_dicts) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": not an opcode torch.save writes for a dict of tensors"));
    }
    if (op->code == 'c' && !IsStateDictGlobal(op->lines[0], op->lines[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " ", op->lines[0], ".", op->lines[1],
                       ": expected a global of a dict of tensors (torch._utils._rebuild_tensor_v2, "
                       "torch.*Storage, collections.OrderedDict)"));
    }
    if (op->code == 'q' || op->code == 'r') {  // BINPUT, LONG_BINPUT: the unpickler grows its memo.
      const uint64_t index = op->Integer();
      if (index > memo_size) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": memo index ", index,
                                                       ", expected at most ", memo_size,
                                                       " (the next free one)"));
      }
      if (index == memo_size) ++memo_size;
    }
    if (op->code == '.') return absl::OkStatus();
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

}  // namespace titan
