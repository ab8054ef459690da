#include "lib/interop/ordered_dict_pickle.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/interop/torch_archive_checks.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

// Pickle pieces as torch.save (protocol 2) writes them.
constexpr char kProto[] = "\x80\x02";
constexpr char kOrderedDict[] = "ccollections\nOrderedDict\n";
std::string Put(int index) { return std::string("q") + static_cast<char>(index); }
std::string Get(int index) { return std::string("h") + static_cast<char>(index); }
std::string Int(int value) { return std::string("K") + static_cast<char>(value); }
std::string Str(const std::string& text) {
  std::string op = "X";
  for (int shift = 0; shift < 32; shift += 8) op += static_cast<char>(text.size() >> shift & 0xff);
  return op + text;
}
// A tensor's stand-in: (value, OrderedDict()), its backward hooks read from the class at memo 0.
std::string Hooked(int value) { return "(" + Int(value) + Get(0) + ")Rt"; }
// The start of torch.save(state_dict): the OrderedDict class at memo 0, the dict at memo 1.
std::string OrderedDictStart() {
  return kProto + std::string(kOrderedDict) + Put(0) + ")R" + Put(1);
}
// state_dict()'s state: {"_metadata": OrderedDict({"": {"version": 1}, "0": {"version": 1}})},
// then BUILD.
std::string MetadataState() {
  return "}" + Str("_metadata") + Get(0) + ")R(" + Str("") + "}" + Str("version") + Int(1) + "s" +
         Str("0") + "}" + Str("version") + Int(1) + "su" + "sb";
}

absl::StatusOr<std::string> Rewrite(const std::string& pickle) {
  const absl::Status checked = CheckStateDictPickle(pickle);
  if (!checked.ok()) return checked;
  return PlainDictPickle(pickle);
}

std::string Refusal(const std::string& pickle) {
  return std::string(Rewrite(pickle).status().message());
}

// What LibTorch's unpickler builds of `pickle`: key -> the tuple's first element.
std::vector<std::pair<std::string, int64_t>> Unpickled(const std::string& pickle) {
  const c10::IValue value = torch::jit::unpickle(pickle.data(), pickle.size());
  std::vector<std::pair<std::string, int64_t>> items;
  for (const auto& item : value.toGenericDict()) {
    items.emplace_back(item.key().toStringRef(), item.value().toTupleRef().elements()[0].toInt());
  }
  return items;
}

TEST(OrderedDictPickleTest, StateDictBecomesThePlainDictInItsOrder) {
  const std::string pickle = OrderedDictStart() + "(" + Str("b") + Hooked(2) + Str("a") +
                             Hooked(1) + "u" + MetadataState() + ".";
  // The class moves to the first tensor's backward hooks; the state and its BUILD go.
  const std::string plain = kProto + std::string("}") + Put(1) + "(" + Str("b") + "(" + Int(2) +
                            kOrderedDict + Put(0) + ")Rt" + Str("a") + Hooked(1) + "u.";
  absl::StatusOr<std::string> rewritten = Rewrite(pickle);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status();
  EXPECT_EQ(*rewritten, plain);
  EXPECT_THAT(Unpickled(*rewritten), ElementsAre(Pair("b", 2), Pair("a", 1)));
  EXPECT_THROW(Unpickled(pickle), c10::Error);  // What LibTorch makes of it unrewritten.
}

// pickle's batches: one item is a SETITEM, more than 1000 are MARK ... SETITEMS groups of 1000;
// the state's OrderedDict is batched the same way.
TEST(OrderedDictPickleTest, EveryBatchingOfItemsAndStateIsRead) {
  const std::string one_item =
      OrderedDictStart() + Str("w") + Hooked(7) + "s" + MetadataState() + ".";
  absl::StatusOr<std::string> rewritten = Rewrite(one_item);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status();
  EXPECT_THAT(Unpickled(*rewritten), ElementsAre(Pair("w", 7)));

  const std::string batched_state = "}" + Str("_metadata") + Get(0) + ")R(" + Str("x") + Int(1) +
                                    Str("y") + Int(2) + "u(" + Str("z") + Int(3) + Str("v") +
                                    Int(4) + "u" + Str("last") + "}s" + "sb";
  const std::string batches = OrderedDictStart() + "(" + Str("a") + Hooked(1) + Str("b") +
                              Hooked(2) + "u(" + Str("c") + Hooked(3) + Str("d") + Hooked(4) + "u" +
                              Str("e") + Hooked(5) + "s" + batched_state + ".";
  rewritten = Rewrite(batches);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status();
  EXPECT_THAT(Unpickled(*rewritten),
              ElementsAre(Pair("a", 1), Pair("b", 2), Pair("c", 3), Pair("d", 4), Pair("e", 5)));
}

TEST(OrderedDictPickleTest, EmptyOrderedDictIsAnEmptyDict) {
  const std::string empty = kProto + std::string("}") + Put(1) + ".";
  for (const std::string& pickle :
       {OrderedDictStart() + ".", OrderedDictStart() + MetadataState() + "."}) {
    absl::StatusOr<std::string> rewritten = Rewrite(pickle);
    ASSERT_TRUE(rewritten.ok()) << rewritten.status();
    EXPECT_EQ(*rewritten, empty);
    EXPECT_TRUE(torch::jit::unpickle(rewritten->data(), rewritten->size()).isGenericDict());
  }
}

TEST(OrderedDictPickleTest, PlainDictIsUnchanged) {
  const std::string pickle = kProto + std::string("}") + Put(0) + "(" + Str("a") + "(" + Int(1) +
                             kOrderedDict + Put(1) + ")Rt" + Str("b") + "(" + Int(2) + Get(1) +
                             ")Rtu.";
  absl::StatusOr<std::string> rewritten = Rewrite(pickle);
  ASSERT_TRUE(rewritten.ok()) << rewritten.status();
  EXPECT_EQ(*rewritten, pickle);
}

// LibTorch's unpickler builds these OrderedDicts as None: refused naming the place instead.
TEST(OrderedDictPickleTest, OrderedDictNestedInTheDictIsRefused) {
  const std::string why =
      "fills a collections.OrderedDict other than the top-level one (a state dict nested in the "
      "dict, as torch.save({\"model\": model.state_dict()}) writes it), which titan does not "
      "read: torch.save the state dict itself";
  // {"model": OrderedDict({"w": ..., "v": ...})}: SETITEMS at byte 73.
  const std::string in_plain = kProto + std::string("}") + Put(0) + Str("model") + kOrderedDict +
                               Put(1) + ")R(" + Str("w") + Hooked(1) + Str("v") + Hooked(2) + "us.";
  EXPECT_EQ(Refusal(in_plain), absl::StrCat("data.pkl: byte 73: SETITEMS: ", why));
  // OrderedDict({"model": OrderedDict({"w": ...})}) with its state: SETITEM at byte 61.
  const std::string in_ordered = OrderedDictStart() + Str("model") + Get(0) + ")R" + Str("w") +
                                 Hooked(1) + "ss" + MetadataState() + ".";
  EXPECT_EQ(Refusal(in_ordered), absl::StrCat("data.pkl: byte 61: SETITEM: ", why));
}

TEST(OrderedDictPickleTest, OnlyStopFollowsTheState) {
  EXPECT_EQ(Refusal(OrderedDictStart() + MetadataState() + "N."),
            absl::StrCat("data.pkl: byte ", (OrderedDictStart() + MetadataState()).size(),
                         ": NONE: expected STOP after the top-level collections.OrderedDict's "
                         "state"));
}

// Counted as Python's unpickler counts them: LibTorch's reads past its stack on an odd SETITEMS.
TEST(OrderedDictPickleTest, OpcodesTakeOnlyObjectsTheStackHolds) {
  const std::string dict = kProto + std::string("}");
  EXPECT_EQ(Refusal(dict + "(" + Str("a") + "u."),
            "data.pkl: byte 10: SETITEMS: 1 object since its MARK, expected key-value pairs");
  EXPECT_EQ(Refusal(dict + "(" + Int(1) + "d."),
            "data.pkl: byte 6: DICT: 1 object since its MARK, expected key-value pairs");
  EXPECT_EQ(Refusal(dict + "u."), "data.pkl: byte 3: SETITEMS: no MARK before it");
  EXPECT_EQ(Refusal(kProto + std::string("(") + Int(1) + Int(2) + "u."),
            "data.pkl: byte 7: SETITEMS: no container before its MARK");
  EXPECT_EQ(Refusal(dict + "(" + Int(1) + "\x86."),
            "data.pkl: byte 6: TUPLE2: takes 2 objects, the stack holds 1 since its MARK");
  EXPECT_EQ(Refusal(dict + Int(1) + "s."),
            "data.pkl: byte 5: SETITEM: takes 3 objects, the stack holds 2");
  EXPECT_EQ(Refusal(dict + "}."),
            "data.pkl: byte 4: STOP: leaves 2 objects and 0 open MARKs, expected one object");
  EXPECT_EQ(Refusal(dict + "(."),
            "data.pkl: byte 4: STOP: leaves 1 object and 1 open MARKs, expected one object");
  EXPECT_EQ(Refusal(dict + Get(0) + "."), "data.pkl: byte 3: BINGET: memo index 0 was never put");
  EXPECT_EQ(Refusal(kProto + std::string("q\x00.", 3)),
            "data.pkl: byte 2: BINPUT: takes 1 object, the stack holds 0");
}

}  // namespace
}  // namespace titan
