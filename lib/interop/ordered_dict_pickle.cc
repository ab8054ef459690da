#include "lib/interop/ordered_dict_pickle.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/interop/torch_archive_checks.h"

namespace titan {
namespace {

constexpr absl::string_view kOrderedDictGlobal = "ccollections\nOrderedDict\n";

// What the walk knows of an object on the unpickler's stack or in its memo.
enum class Object : uint8_t {
  kOther,
  kOrderedDictClass,  // GLOBAL collections.OrderedDict.
  kOrderedDict,       // An instance of it.
  kTopLevelDict,      // The pickle's top-level OrderedDict, rewritten as a plain dict.
};

bool IsOrderedDictGlobal(const PickleOp& op) {
  return op.code == 'c' && op.lines[0] == "collections" && op.lines[1] == "OrderedDict";
}
bool IsPut(const PickleOp& op) { return op.code == 'q' || op.code == 'r'; }  // (LONG_)BINPUT.

// Where torch.save wrote the top-level OrderedDict: PROTO, then GLOBAL collections OrderedDict,
// BINPUT k, EMPTY_TUPLE, REDUCE.
struct TopLevelOrderedDict {
  size_t start = 0;                   // The GLOBAL.
  size_t end = 0;                     // Past the REDUCE.
  std::optional<PickleOp> class_put;  // BINPUT k: the tensors' backward hooks read the class back.
};

// Opcodes that do not read are the main walk's to report.
std::optional<TopLevelOrderedDict> FindTopLevelOrderedDict(absl::string_view pickle) {
  size_t pos = 0;
  const auto next = [&]() -> std::optional<PickleOp> {
    if (pos >= pickle.size()) return std::nullopt;
    absl::StatusOr<PickleOp> op = ReadPickleOp(pickle, pos);
    if (!op.ok()) return std::nullopt;
    pos = op->end;
    return *op;
  };
  std::optional<PickleOp> op = next();
  if (!op.has_value() || op->code != 0x80) return std::nullopt;  // PROTO.
  op = next();
  if (!op.has_value() || !IsOrderedDictGlobal(*op)) return std::nullopt;
  TopLevelOrderedDict top;
  top.start = op->start;
  op = next();
  if (op.has_value() && IsPut(*op)) {
    top.class_put = op;
    op = next();
  }
  if (!op.has_value() || op->code != ')') return std::nullopt;  // EMPTY_TUPLE.
  op = next();
  if (!op.has_value() || op->code != 'R') return std::nullopt;  // REDUCE.
  top.end = op->end;
  return top;
}

std::string Objects(size_t count) {
  return absl::StrCat(count, count == 1 ? " object" : " objects");
}

absl::Status OpError(const PickleOp& op, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("data.pkl: byte ", op.start, ": ", op.name, ": ", what));
}

}  // namespace

// Walks the pickle as the unpickler would, knowing of each object only whether it is an
// OrderedDict: that finds the top-level dict's state (the object a BUILD gives it when the stack
// holds nothing else), and OrderedDicts given items elsewhere, which the unpickler would build as
// None. Stack counts are checked as Python's unpickler checks them; LibTorch's reads past its
// stack on some (an odd number of objects before SETITEMS).
absl::StatusOr<std::string> PlainDictPickle(absl::string_view pickle) {
  const std::optional<TopLevelOrderedDict> top = FindTopLevelOrderedDict(pickle);
  std::vector<Object> stack;
  std::vector<size_t> marks;  // The stack's size at each open MARK.
  std::vector<Object> memo;
  std::optional<PickleOp> first_class_get;  // The first BINGET k of the top-level class.
  bool class_memo_replaced = false;
  size_t object_start = 0;  // The last object begun on the top-level dict alone.
  std::optional<size_t> state_start, state_end;  // The top-level dict's state and its BUILD.
  std::optional<size_t> stop_end;
  std::optional<absl::Status> misplaced;  // The first OrderedDict given items elsewhere.
  size_t misplaced_at = 0;
  size_t pos = 0;
  while (pos < pickle.size() && !stop_end.has_value()) {
    absl::StatusOr<PickleOp> read = ReadPickleOp(pickle, pos);
    if (!read.ok()) return read.status();
    const PickleOp& op = *read;
    pos = op.end;
    if (state_end.has_value() && op.code != '.') {
      return OpError(op, "expected STOP after the top-level collections.OrderedDict's state");
    }
    const size_t frame = marks.empty() ? 0 : marks.back();  // Below it: the enclosing objects.
    const auto need = [&](size_t count) -> absl::Status {
      if (stack.size() - frame >= count) return absl::OkStatus();
      return OpError(
          op, absl::StrCat("takes ", Objects(count), ", the stack holds ", stack.size() - frame,
                           marks.empty() ? "" : " since its MARK"));
    };
    // The objects since the innermost MARK, which SETITEMS, DICT, TUPLE, LIST and APPENDS take.
    const auto take_marked = [&](bool pairs) -> absl::Status {
      if (marks.empty()) return OpError(op, "no MARK before it");
      const size_t count = stack.size() - frame;
      if (pairs && count % 2 != 0) {
        return OpError(op,
                       absl::StrCat(Objects(count), " since its MARK, expected key-value pairs"));
      }
      marks.pop_back();
      stack.resize(frame);
      return absl::OkStatus();
    };
    // An OrderedDict given items or state where LibTorch's unpickler holds None.
    const auto misplace = [&] {
      if (misplaced.has_value()) return;
      misplaced_at = op.start;
      misplaced = OpError(
          op,
          "fills a collections.OrderedDict other than the top-level one (a state dict nested "
          "in the dict, as torch.save({\"model\": model.state_dict()}) writes it), which titan "
          "does not read: torch.save the state dict itself");
    };
    if (stack.size() == 1 && marks.empty() && !IsPut(op)) object_start = op.start;
    switch (op.code) {
      case 0x80:  // PROTO
        break;
      case '(':  // MARK
        marks.push_back(stack.size());
        break;
      case '.':  // STOP
        if (stack.size() != 1 || !marks.empty()) {
          return OpError(op, absl::StrCat("leaves ", Objects(stack.size()), " and ", marks.size(),
                                          " open MARKs, expected one object"));
        }
        stop_end = op.end;
        break;
      case 'c':  // GLOBAL
        stack.push_back(IsOrderedDictGlobal(op) ? Object::kOrderedDictClass : Object::kOther);
        break;
      case 'h':    // BINGET
      case 'j': {  // LONG_BINGET
        const uint64_t index = op.Integer();
        if (index >= memo.size()) {
          return OpError(op, absl::StrCat("memo index ", index, " was never put"));
        }
        if (top.has_value() && top->class_put.has_value() && !class_memo_replaced &&
            !first_class_get.has_value() && index == top->class_put->Integer()) {
          first_class_get = op;
        }
        stack.push_back(memo[index]);
        break;
      }
      case 'q':    // BINPUT
      case 'r': {  // LONG_BINPUT
        if (absl::Status status = need(1); !status.ok()) return status;
        const uint64_t index = op.Integer();
        if (index > memo.size()) {  // CheckStateDictPickle refused it already.
          return OpError(op, absl::StrCat("memo index ", index, " past the next free one"));
        }
        if (index == memo.size()) memo.emplace_back();
        memo[index] = stack.back();
        if (top.has_value() && top->class_put.has_value() && op.start != top->class_put->start &&
            index == top->class_put->Integer()) {
          class_memo_replaced = true;
        }
        break;
      }
      case 'J':   // BININT
      case 'K':   // BININT1
      case 'M':   // BININT2
      case 0x8a:  // LONG1
      case 'G':   // BINFLOAT
      case 'N':   // NONE
      case 0x88:  // NEWTRUE
      case 0x89:  // NEWFALSE
      case 'X':   // BINUNICODE
      case '}':   // EMPTY_DICT
      case ']':   // EMPTY_LIST
      case ')':   // EMPTY_TUPLE
        stack.push_back(Object::kOther);
        break;
      case 'Q':  // BINPERSID
        if (absl::Status status = need(1); !status.ok()) return status;
        stack.back() = Object::kOther;
        break;
      case 0x85:  // TUPLE1
      case 0x86:  // TUPLE2
      case 0x87:  // TUPLE3
        if (absl::Status status = need(op.code - 0x84); !status.ok()) return status;
        stack.resize(stack.size() - (op.code - 0x84));
        stack.push_back(Object::kOther);
        break;
      case 'R': {  // REDUCE
        if (absl::Status status = need(2); !status.ok()) return status;
        const Object callable = stack[stack.size() - 2];
        stack.pop_back();
        stack.back() = top.has_value() && op.end == top->end   ? Object::kTopLevelDict
                       : callable == Object::kOrderedDictClass ? Object::kOrderedDict
                                                               : Object::kOther;
        break;
      }
      case 'b': {  // BUILD: the state on top, its object below.
        if (absl::Status status = need(2); !status.ok()) return status;
        if (stack.size() == 2 && marks.empty() && stack[0] == Object::kTopLevelDict) {
          state_start = object_start;
          state_end = op.end;
        } else if (stack[stack.size() - 2] == Object::kOrderedDict ||
                   stack[stack.size() - 2] == Object::kTopLevelDict) {
          misplace();
        }
        stack.pop_back();
        break;
      }
      case 's':  // SETITEM
        if (absl::Status status = need(3); !status.ok()) return status;
        if (stack[stack.size() - 3] == Object::kOrderedDict) misplace();
        stack.resize(stack.size() - 2);
        break;
      case 'u':    // SETITEMS
      case 'e': {  // APPENDS
        const size_t enclosing = marks.size() >= 2 ? marks[marks.size() - 2] : 0;
        if (!marks.empty() && frame == enclosing) {
          return OpError(op, "no container before its MARK");
        }
        if (!marks.empty() && op.code == 'u' && stack[frame - 1] == Object::kOrderedDict) {
          misplace();
        }
        if (absl::Status status = take_marked(op.code == 'u'); !status.ok()) return status;
        break;
      }
      case 't':    // TUPLE
      case 'l':    // LIST
      case 'd': {  // DICT
        if (absl::Status status = take_marked(op.code == 'd'); !status.ok()) return status;
        stack.push_back(Object::kOther);
        break;
      }
      default:  // CheckStateDictPickle refused it already.
        return OpError(op, "not an opcode torch.save writes for a dict of tensors");
    }
  }
  if (!stop_end.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.pkl: ", pickle.size(), " bytes without a STOP opcode"));
  }
  if (misplaced.has_value() && (!state_start.has_value() || misplaced_at < *state_start)) {
    return *misplaced;
  }
  if (!top.has_value()) return std::string(pickle.substr(0, *stop_end));

  // PROTO, then EMPTY_DICT for the OrderedDict; the class moves to where a tensor's backward hooks
  // first read it back from the memo (LibTorch's unpickler has no POP to drop it at the top).
  std::string plain(pickle.substr(0, top->start));
  plain += '}';
  pos = top->end;
  const auto copy_to = [&](size_t end) {
    absl::StrAppend(&plain, pickle.substr(pos, end - pos));
    pos = end;
  };
  const size_t kept_end = state_start.value_or(*stop_end - 1);  // Before the state, or the STOP.
  if (first_class_get.has_value() && first_class_get->start < kept_end) {
    copy_to(first_class_get->start);
    absl::StrAppend(
        &plain, kOrderedDictGlobal,
        pickle.substr(top->class_put->start, top->class_put->end - top->class_put->start));
    pos = first_class_get->end;
  }
  copy_to(kept_end);
  plain += '.';  // STOP.
  return plain;
}

}  // namespace titan
