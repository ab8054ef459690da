#include "lib/interop/meta_checkpoint.h"

#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/test_dir.h"
#include "lib/interop/torch_state_dict.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using std::string_literals::operator""s;

// A torch.save-shaped zip whose data.pkl is `pickle`, with storage records data/<key>.
std::string ArchiveWithPickle(
    const std::string& pickle,
    const std::vector<std::pair<std::string, at::Tensor>>& storages = {}) {
  std::string archive;
  caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t size) {
    archive.append(static_cast<const char*>(data), size);
    return size;
  });
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const auto& [key, tensor] : storages) {
    zip.writeRecord("data/" + key, tensor.data_ptr(), tensor.nbytes());
  }
  zip.writeRecord("byteorder", "little", 6);
  zip.writeEndOfFile();
  return archive;
}

constexpr char kRejected[] = "consolidated.00.pth: not a torch.save state dict of tensors: ";

// Why ParseTorchStateDict rejects `archive`, after the prefix every rejection carries.
std::string RejectionReason(const std::string& archive) {
  const absl::StatusOr<NamedTensors> parsed = ParseTorchStateDict(archive, "consolidated.00.pth");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(parsed.status().message());
  EXPECT_THAT(message, StartsWith(kRejected));
  return message.substr(std::min(message.size(), std::strlen(kRejected)));
}

std::string ParseError(const std::string& pickle) {
  return RejectionReason(ArchiveWithPickle(pickle));
}

TEST(MetaCheckpointTest, WrittenCheckpointParsesBack) {
  const std::string dir = TestDir("meta");
  const NamedTensors tensors = {{"tok_embeddings.weight", at::randn({4, 3})},
                                {"norm.weight", at::ones({3}, at::kBFloat16)}};
  ASSERT_TRUE(MakeDirectories(dir).ok());
  const absl::Status written = WriteMetaCheckpoint(dir, tensors, nlohmann::json::object());
  ASSERT_TRUE(written.ok()) << written;
  absl::StatusOr<std::string> bytes = ReadFile(dir + "/consolidated.00.pth");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  absl::StatusOr<NamedTensors> parsed = ParseTorchStateDict(*bytes, "consolidated.00.pth");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  for (const auto& [name, tensor] : *parsed) {
    const at::Tensor& expected = name == "norm.weight" ? tensors[1].second : tensors[0].second;
    EXPECT_TRUE(tensor.equal(expected)) << name;
  }
}

// Read from its file, a tensor aliases the file's mapping rather than a copy of its own: the
// memory belongs to the mapping's owner (the DataPtr's context), not to an allocation of it.
TEST(MetaCheckpointTest, FileTensorsAliasTheMapping) {
  const std::string dir = TestDir("mapped");
  const NamedTensors tensors = {{"tok_embeddings.weight", at::randn({4, 3})},
                                {"norm.weight", at::ones({3}, at::kBFloat16)}};
  ASSERT_TRUE(MakeDirectories(dir).ok());
  ASSERT_TRUE(WriteMetaCheckpoint(dir, tensors, nlohmann::json::object()).ok());
  absl::StatusOr<NamedTensors> read = ReadTorchStateDictFile(dir + "/consolidated.00.pth");
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 2u);
  for (size_t i = 0; i < read->size(); ++i) {
    const auto& [name, tensor] = (*read)[i];
    EXPECT_EQ(name, tensors[i].first);
    EXPECT_TRUE(tensor.equal(tensors[i].second)) << name;
    const c10::DataPtr& memory = tensor.storage().data_ptr();
    EXPECT_NE(memory.get_context(), memory.get()) << name;
  }
}

// data.pkl of torch.save(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
// .state_dict()) from torch 2.11: an OrderedDict with its _metadata, over storages "0" to "3".
constexpr char kStateDictPickle[] =
    "\x80\x02"
    "ccollections\nOrderedDict\nq\x00)Rq\x01(X\x08\x00\x00\x00"
    "0.weightq\x02"
    "ctorch._utils\n_rebuild_tensor_v2\nq\x03((X\x07\x00\x00\x00storageq\x04"
    "ctorch\nFloatStorage\nq\x05X\x01\x00\x00\x00"
    "0q\x06X\x03\x00\x00\x00"
    "cpuq\x07K\x04tq\x08QK\x00K\x02K\x02\x86q\x09K\x02K\x01\x86q\n\x89h\x00)Rq\x0btq"
    "\x0cRq\x0dX\x06\x00\x00\x00"
    "0.biasq\x0eh\x03((h\x04h\x05X\x01\x00\x00\x00"
    "1q\x0fh\x07K\x02tq\x10QK\x00K\x02\x85q\x11K\x01\x85q\x12\x89h\x00)Rq\x13tq\x14Rq"
    "\x15X\x08\x00\x00\x00"
    "1.weightq\x16h\x03((h\x04h\x05X\x01\x00\x00\x00"
    "2q\x17h\x07K\x02tq\x18QK\x00K\x02\x85q\x19K\x01\x85q\x1a\x89h\x00)Rq\x1btq\x1cRq"
    "\x1dX\x06\x00\x00\x00"
    "1.biasq\x1eh\x03((h\x04h\x05X\x01\x00\x00\x00"
    "3q\x1fh\x07K\x02tq QK\x00K\x02\x85q!K\x01\x85q\"\x89h\x00)Rq#tq$Rq%u}q&X\x09\x00"
    "\x00\x00_metadataq'h\x00)Rq((X\x00\x00\x00\x00q)}q*X\x07\x00\x00\x00versionq+K"
    "\x01sX\x01\x00\x00\x00"
    "0q,}q-h+K\x01sX\x01\x00\x00\x00"
    "1q.}q/h+K\x01susb.";

// torch.save(model.state_dict()) pickles an OrderedDict, which LibTorch's unpickler alone builds
// as None: read as the dict it holds, in its order.
TEST(MetaCheckpointTest, OrderedDictStateDictReadsAsItsDict) {
  const std::vector<std::pair<std::string, at::Tensor>> tensors = {{"0.weight", at::randn({2, 2})},
                                                                   {"0.bias", at::randn({2})},
                                                                   {"1.weight", at::randn({2})},
                                                                   {"1.bias", at::randn({2})}};
  std::vector<std::pair<std::string, at::Tensor>> storages;
  for (size_t i = 0; i < tensors.size(); ++i) {
    storages.emplace_back(std::to_string(i), tensors[i].second);
  }
  const std::string archive =
      ArchiveWithPickle(std::string(kStateDictPickle, sizeof(kStateDictPickle) - 1), storages);
  absl::StatusOr<NamedTensors> parsed = ParseTorchStateDict(archive, "pytorch_model.bin");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ((*parsed)[i].first, tensors[i].first);
    EXPECT_TRUE((*parsed)[i].second.equal(tensors[i].second)) << tensors[i].first;
  }
}

// torch.save before PyTorch 1.6 wrote a bare pickle (after a magic number) or a tar: refused as
// such, naming the file.
TEST(MetaCheckpointTest, LegacyTorchSaveIsRefusedNamingTheFile) {
  for (const std::string& legacy : {"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e"s,
                                    std::string(257, '\0') + "ustar" + std::string(700, '\0')}) {
    EXPECT_EQ(ParseTorchStateDict(legacy, "pytorch_model.bin").status().message(),
              "pytorch_model.bin: torch.save's legacy format (PyTorch before 1.6, not a zip "
              "archive), which titan does not read: save it again with a newer torch.save, or as "
              "safetensors");
  }
}

// The fuzzer's finding: a 4 GB string length in a 1 KB file made the unpickler reserve 4 GB.
TEST(MetaCheckpointTest, StringLengthPastThePickleIsRejectedBeforeUnpickling) {
  const std::string pickle = "\x80\x02}q\x00(X\xf9\xff\xff\xfd"s + "storage.";
  EXPECT_EQ(ParseError(pickle), "data.pkl: byte 6: BINUNICODE: claims 4261412857 bytes, 8 left");
}

// The fuzzer's second finding: LibTorch's zip reader allocated the 4 GB a directory entry claimed
// for a 277-byte stored record.
TEST(MetaCheckpointTest, ZipRecordLargerThanTheArchiveIsRejectedBeforeOpening) {
  std::string archive = ArchiveWithPickle("\x80\x02}."s);
  const size_t entry = archive.find("PK\1\2");  // The first directory entry: data.pkl's.
  ASSERT_NE(entry, std::string::npos);
  archive.replace(entry + 24, 4, "\x15\x01\xfd\xff"s);  // Uncompressed size 4294770965.
  EXPECT_EQ(RejectionReason(archive),
            absl::StrCat("zip record archive/data.pkl claims 4294770965 bytes, the archive has ",
                         archive.size(), " (torch.save stores records uncompressed)"));
}

TEST(MetaCheckpointTest, EveryLengthFieldIsChecked) {
  EXPECT_EQ(ParseError("\x80\x02\x8d\xff\xff\xff\xff\xff\xff\xff\x7f."s),
            "data.pkl: byte 2: BINUNICODE8: claims 9223372036854775807 bytes, 1 left");
  EXPECT_EQ(ParseError("\x80\x02\x96\x10\0\0\0\0\0\0\0abc."s),
            "data.pkl: byte 2: BYTEARRAY8: claims 16 bytes, 4 left");
  EXPECT_EQ(ParseError("\x80\x02"
                       "C\x05"
                       "ab."s),
            "data.pkl: byte 2: SHORT_BINBYTES: claims 5 bytes, 3 left");
  EXPECT_EQ(ParseError("\x80\x02T\x00\x00\x00\x80."s),
            "data.pkl: byte 2: BINSTRING: claims 2147483648 bytes, 1 left");
  EXPECT_EQ(ParseError("\x80\x02X\x01\0"s),
            "data.pkl: byte 2: BINUNICODE: needs a 4-byte length, 2 bytes left");
}

TEST(MetaCheckpointTest, MemoIndexBeyondTheNextFreeOneIsRejected) {
  EXPECT_EQ(ParseError("\x80\x02}q\x00r\xff\xff\xff\xff."s),
            "data.pkl: byte 5: LONG_BINPUT: memo index 4294967295, expected at most 1 (the next "
            "free one)");
}

TEST(MetaCheckpointTest, OnlyStateDictOpcodesAndGlobals) {
  EXPECT_EQ(ParseError("\x80\x02"
                       "cos\nsystem\nX\x04\x00\x00\x00true\x85R."s),
            "data.pkl: byte 2: GLOBAL os.system: expected a global of a dict of tensors "
            "(torch._utils._rebuild_tensor_v2, torch.*Storage, collections.OrderedDict)");
  EXPECT_EQ(
      ParseError("\x80\x02\x93."s),
      "data.pkl: byte 2: STACK_GLOBAL: not an opcode torch.save writes for a dict of tensors");
  EXPECT_EQ(ParseError("\x80\x02\xff."s), "data.pkl: byte 2: unknown pickle opcode 0xff");
  EXPECT_EQ(ParseError("\x80\x02}"s), "data.pkl: 3 bytes without a STOP opcode");
  EXPECT_THAT(ParseError("\x80\x02"
                         "ctorch\nFloatStorage"),
              HasSubstr("GLOBAL: no newline"));
}

}  // namespace
}  // namespace titan
