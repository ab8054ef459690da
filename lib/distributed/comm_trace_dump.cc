#include "lib/distributed/comm_trace_dump.h"

#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// What a dump's field must hold.
enum class Kind { kString, kInt, kBool, kList, kDict, kTuple };

std::string KindName(Kind kind) {
  switch (kind) {
    case Kind::kString:
      return "a string";
    case Kind::kInt:
      return "an int";
    case Kind::kBool:
      return "a bool";
    case Kind::kList:
      return "a list";
    case Kind::kDict:
      return "a dict";
    case Kind::kTuple:
      return "a tuple";
  }
  return "?";
}

bool IsKind(const c10::IValue& value, Kind kind) {
  switch (kind) {
    case Kind::kString:
      return value.isString();
    case Kind::kInt:
      return value.isInt();
    case Kind::kBool:
      return value.isBool();
    case Kind::kList:
      return value.isList();
    case Kind::kDict:
      return value.isGenericDict();
    case Kind::kTuple:
      return value.isTuple();
  }
  return false;
}

// What an unpickled value is, in Python's words.
std::string Describe(const c10::IValue& value) {
  for (const Kind kind :
       {Kind::kString, Kind::kInt, Kind::kBool, Kind::kList, Kind::kDict, Kind::kTuple}) {
    if (IsKind(value, kind)) return KindName(kind);
  }
  if (value.isNone()) return "None";
  if (value.isDouble()) return "a float";
  return absl::StrCat("a ", value.tagKind());
}

// `value` (`what`, for the error) when it is a `kind`.
absl::StatusOr<c10::IValue> Expect(const c10::IValue& value, Kind kind, absl::string_view what) {
  if (IsKind(value, kind)) return value;
  return absl::DataLossError(
      absl::StrCat(what, " is ", Describe(value), ", expected ", KindName(kind)));
}

// `dict`'s `key` when it holds a `kind`; `where` ("FILE: entries[3]") names the dict in errors.
absl::StatusOr<c10::IValue> Field(const c10::impl::GenericDict& dict, const std::string& key,
                                  Kind kind, absl::string_view where) {
  const auto found = dict.find(key);
  if (found == dict.end()) {
    return absl::DataLossError(
        absl::StrCat(where, ": no field '", key, "' (expected ", KindName(kind), ")"));
  }
  return Expect(found->value(), kind, absl::StrCat(where, ": field '", key, "'"));
}

// As Field, for a field dumps may leave out (c10d's lack titan's keys): nullopt when absent.
absl::StatusOr<std::optional<c10::IValue>> OptionalField(const c10::impl::GenericDict& dict,
                                                         const std::string& key, Kind kind,
                                                         absl::string_view where) {
  if (!dict.contains(key)) return std::nullopt;
  TITAN_ASSIGN_OR_RETURN(c10::IValue value, Field(dict, key, kind, where));
  return value;
}

// An entry's tensor sizes, a list of lists of ints, as "[[16], [4, 4]]"; `what` names the field.
absl::StatusOr<std::string> SizesText(const c10::IValue& list, absl::string_view what) {
  std::vector<std::string> tensors;
  for (size_t i = 0; i < list.toListRef().size(); ++i) {
    const std::string tensor_what = absl::StrCat(what, "[", i, "]");
    TITAN_ASSIGN_OR_RETURN(const c10::IValue tensor,
                           Expect(list.toListRef()[i], Kind::kList, tensor_what));
    std::vector<std::string> dims;
    for (size_t j = 0; j < tensor.toListRef().size(); ++j) {
      TITAN_ASSIGN_OR_RETURN(const c10::IValue dim, Expect(tensor.toListRef()[j], Kind::kInt,
                                                           absl::StrCat(tensor_what, "[", j, "]")));
      dims.push_back(absl::StrCat(dim.toInt()));
    }
    tensors.push_back(absl::StrCat("[", absl::StrJoin(dims, ", "), "]"));
  }
  return absl::StrCat("[", absl::StrJoin(tensors, ", "), "]");
}

// An entry's tensor dtypes, a list of strings, as "[Float, BFloat16]"; `what` names the field.
absl::StatusOr<std::string> DtypesText(const c10::IValue& list, absl::string_view what) {
  std::vector<std::string> dtypes;
  for (size_t i = 0; i < list.toListRef().size(); ++i) {
    TITAN_ASSIGN_OR_RETURN(const c10::IValue dtype, Expect(list.toListRef()[i], Kind::kString,
                                                           absl::StrCat(what, "[", i, "]")));
    dtypes.push_back(dtype.toStringRef());
  }
  return absl::StrCat("[", absl::StrJoin(dtypes, ", "), "]");
}

// c10d writes a group's ranks as "[0, 1, 2]"; `what` names the field.
absl::StatusOr<std::vector<int>> ParseRanks(const std::string& text, absl::string_view what) {
  absl::string_view inner = text;
  if (!absl::ConsumePrefix(&inner, "[") || !absl::ConsumeSuffix(&inner, "]")) {
    return absl::DataLossError(absl::StrCat(what, " \"", text, "\": expected [r, ...]"));
  }
  std::vector<int> ranks;
  for (absl::string_view item : absl::StrSplit(inner, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    int rank = 0;
    if (!absl::SimpleAtoi(item, &rank) || rank < 0) {
      return absl::DataLossError(absl::StrCat(what, " \"", text, "\": \"", item, "\" is no rank"));
    }
    if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
      return absl::DataLossError(absl::StrCat(what, " \"", text, "\": rank ", rank, " twice"));
    }
    ranks.push_back(rank);
  }
  return ranks;
}

// The dump's "pg_config": group name -> {"ranks": "[0, 1]", ...}.
absl::Status ReadGroups(const c10::impl::GenericDict& root, const std::string& path,
                        CommTraceDump* dump) {
  TITAN_ASSIGN_OR_RETURN(const c10::IValue groups, Field(root, "pg_config", Kind::kDict, path));
  for (const auto& item : groups.toGenericDict()) {
    TITAN_ASSIGN_OR_RETURN(const c10::IValue name, Expect(item.key(), Kind::kString,
                                                          absl::StrCat(path, ": a pg_config key")));
    const std::string where = absl::StrCat(path, ": pg_config['", name.toStringRef(), "']");
    TITAN_ASSIGN_OR_RETURN(const c10::IValue group, Expect(item.value(), Kind::kDict, where));
    TITAN_ASSIGN_OR_RETURN(const c10::IValue ranks,
                           Field(group.toGenericDict(), "ranks", Kind::kString, where));
    TITAN_ASSIGN_OR_RETURN(dump->group_ranks[name.toStringRef()],
                           ParseRanks(ranks.toStringRef(), absl::StrCat(where, ": field 'ranks'")));
  }
  return absl::OkStatus();
}

// CommTraceEntry `index` of the dump's "entries" into `dump`'s collectives (point-to-point ones are
// left out); `path` names the dump in errors.
absl::Status ReadEntry(const c10::IValue& value, size_t index, const std::string& path,
                       CommTraceDump* dump) {
  const std::string where = absl::StrCat(path, ": entries[", index, "]");
  TITAN_ASSIGN_OR_RETURN(const c10::IValue entry_value, Expect(value, Kind::kDict, where));
  const c10::impl::GenericDict entry = entry_value.toGenericDict();
  TITAN_ASSIGN_OR_RETURN(const c10::IValue p2p, Field(entry, "is_p2p", Kind::kBool, where));
  if (p2p.toBool()) return absl::OkStatus();
  // (group name, description)
  TITAN_ASSIGN_OR_RETURN(const c10::IValue process_group,
                         Field(entry, "process_group", Kind::kTuple, where));
  const std::string group_what = absl::StrCat(where, ": field 'process_group'");
  if (process_group.toTupleRef().elements().empty()) {
    return absl::DataLossError(
        absl::StrCat(group_what, " is an empty tuple, expected (name, description)"));
  }
  TITAN_ASSIGN_OR_RETURN(const c10::IValue group,
                         Expect(process_group.toTupleRef().elements()[0], Kind::kString,
                                absl::StrCat(group_what, "[0]")));
  TITAN_ASSIGN_OR_RETURN(const c10::IValue seq,
                         Field(entry, "collective_seq_id", Kind::kInt, where));
  TITAN_ASSIGN_OR_RETURN(const c10::IValue op,
                         Field(entry, "profiling_name", Kind::kString, where));
  TITAN_ASSIGN_OR_RETURN(const c10::IValue state, Field(entry, "state", Kind::kString, where));
  TITAN_ASSIGN_OR_RETURN(const c10::IValue inputs, Field(entry, "input_sizes", Kind::kList, where));
  TITAN_ASSIGN_OR_RETURN(const c10::IValue outputs,
                         Field(entry, "output_sizes", Kind::kList, where));
  TITAN_ASSIGN_OR_RETURN(const c10::IValue input_dtypes,
                         Field(entry, "input_dtypes", Kind::kList, where));
  TITAN_ASSIGN_OR_RETURN(const c10::IValue output_dtypes,
                         Field(entry, "output_dtypes", Kind::kList, where));
  TITAN_ASSIGN_OR_RETURN(const std::optional<c10::IValue> created,
                         OptionalField(entry, "time_created_ns", Kind::kInt, where));
  TITAN_ASSIGN_OR_RETURN(const std::optional<c10::IValue> timeout,
                         OptionalField(entry, "timeout_ms", Kind::kInt, where));
  CommTraceEntry read{op.toStringRef(), state.toStringRef()};
  TITAN_ASSIGN_OR_RETURN(read.input_sizes,
                         SizesText(inputs, absl::StrCat(where, ": field 'input_sizes'")));
  TITAN_ASSIGN_OR_RETURN(read.output_sizes,
                         SizesText(outputs, absl::StrCat(where, ": field 'output_sizes'")));
  TITAN_ASSIGN_OR_RETURN(read.input_dtypes,
                         DtypesText(input_dtypes, absl::StrCat(where, ": field 'input_dtypes'")));
  TITAN_ASSIGN_OR_RETURN(read.output_dtypes,
                         DtypesText(output_dtypes, absl::StrCat(where, ": field 'output_dtypes'")));
  if (created.has_value()) read.created_ns = created->toInt();
  if (timeout.has_value()) read.timeout_ms = timeout->toInt();
  dump->collectives[group.toStringRef()][seq.toInt()] = std::move(read);
  return absl::OkStatus();
}

// Every group `dump` recorded collectives of is in its pg_config with its ranks: the members of
// another (c10d's Gloo dumps list none) are unknown, so its collectives could not be checked.
absl::Status CheckGroupsKnown(const CommTraceDump& dump, const std::string& path) {
  for (const auto& [name, unused] : dump.collectives) {
    const auto found = dump.group_ranks.find(name);
    if (found != dump.group_ranks.end() && !found->second.empty()) continue;
    std::vector<std::string> listed;
    for (const auto& [known, ranks] : dump.group_ranks) {
      listed.push_back(absl::StrCat("'", known, "' [", absl::StrJoin(ranks, ","), "]"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": entries of group '", name, "', which its pg_config ",
                     found == dump.group_ranks.end() ? "does not list" : "gives no ranks",
                     " (it lists ", listed.empty() ? "none" : absl::StrJoin(listed, ", "),
                     "): the group's members are unknown, its collectives cannot be checked"));
  }
  return absl::OkStatus();
}

}  // namespace

// Each field is checked before it is read: LibTorch's accessors would refuse another type with an
// internal assertion ("please report a bug to PyTorch") that names neither field nor file.
absl::StatusOr<CommTraceDump> ReadCommTraceDump(const std::string& path) {
  TITAN_ASSIGN_OR_RETURN(const std::string bytes, ReadFile(path));
  // LibTorch's unpickler reads protocol 2, what c10d writes, and would name another as a raw byte.
  if (bytes.size() >= 2 && bytes[0] == '\x80' && bytes[1] != 2) {
    return absl::DataLossError(absl::StrCat(
        path, ": pickle protocol ", static_cast<int>(static_cast<unsigned char>(bytes[1])),
        ", expected 2 (what c10d writes; re-pickle with pickle.dump(..., protocol=2))"));
  }
  c10::IValue unpickled;
  try {
    unpickled = torch::jit::unpickle(bytes.data(), bytes.size());
  } catch (const c10::Error& e) {  // without the C++ backtrace what() appends
    return absl::DataLossError(
        absl::StrCat(path, ": not a flight-recorder dump: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::DataLossError(absl::StrCat(path, ": not a flight-recorder dump: ", e.what()));
  }
  if (!unpickled.isGenericDict()) {
    return absl::DataLossError(absl::StrCat(path, ": not a flight-recorder dump: the top level is ",
                                            Describe(unpickled), ", expected a dict"));
  }
  const c10::impl::GenericDict root = unpickled.toGenericDict();
  CommTraceDump dump;
  TITAN_RETURN_IF_ERROR(ReadGroups(root, path, &dump));
  TITAN_ASSIGN_OR_RETURN(const std::optional<c10::IValue> run_id,
                         OptionalField(root, "run_id", Kind::kString, path));
  if (run_id.has_value()) dump.run_id = run_id->toStringRef();
  TITAN_ASSIGN_OR_RETURN(const std::optional<c10::IValue> writer,
                         OptionalField(root, "rank", Kind::kInt, path));
  if (writer.has_value()) dump.writer = static_cast<int>(writer->toInt());
  TITAN_ASSIGN_OR_RETURN(const std::optional<c10::IValue> dumped,
                         OptionalField(root, "dump_time_ns", Kind::kInt, path));
  if (dumped.has_value()) dump.dumped_ns = dumped->toInt();
  TITAN_ASSIGN_OR_RETURN(const std::optional<c10::IValue> entries,
                         OptionalField(root, "entries", Kind::kList, path));
  if (!entries.has_value()) return dump;
  for (size_t i = 0; i < entries->toListRef().size(); ++i) {
    TITAN_RETURN_IF_ERROR(ReadEntry(entries->toListRef()[i], i, path, &dump));
  }
  TITAN_RETURN_IF_ERROR(CheckGroupsKnown(dump, path));
  return dump;
}

}  // namespace titan
