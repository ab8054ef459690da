#include "lib/checkpoint/safetensors.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

std::string TempDir() { return std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp"; }

std::string BytesOf(const at::Tensor& tensor) {
  at::Tensor contiguous = tensor.contiguous();
  return std::string(static_cast<const char*>(contiguous.data_ptr()), contiguous.nbytes());
}

// A tensor of `type` and `shape` with random bit patterns (NaNs included: comparisons are bitwise).
at::Tensor RandomTensor(at::ScalarType type, std::vector<int64_t> shape) {
  if (type == at::kBool) return at::randint(0, 2, shape, at::kByte).to(at::kBool);
  const int64_t item = c10::elementSize(type);
  std::vector<int64_t> byte_shape = shape;
  if (byte_shape.empty()) return at::randint(0, 256, {item}, at::kByte).view(type).reshape({});
  byte_shape.back() *= item;
  return at::randint(0, 256, byte_shape, at::kByte).view(type);
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A file with the given header text and data bytes.
std::string RawFile(const std::string& header, const std::string& data) {
  const uint64_t length = header.size();
  return std::string(reinterpret_cast<const char*>(&length), 8) + header + data;
}

const at::ScalarType kAllTypes[] = {
    at::kFloat,
    at::kHalf,
    at::kBFloat16,
    at::kDouble,
    at::kLong,
    at::kInt,
    at::kShort,
    at::kChar,
    at::kByte,
    at::kBool,
    at::kFloat8_e4m3fn,
    at::kFloat8_e5m2,
    at::kFloat8_e4m3fnuz,
    at::kFloat8_e5m2fnuz,
    at::kUInt16,
    at::kUInt32,
    at::kUInt64,
    at::kComplexFloat,
};

TEST(SafetensorsTest, RoundTripsEveryDtypeBitwise) {
  const std::string path = TempDir() + "/all_dtypes.safetensors";
  NamedTensors tensors;
  for (at::ScalarType type : kAllTypes) {
    tensors.emplace_back(absl::StrCat("t.", c10::toString(type)), RandomTensor(type, {3, 5}));
  }
  tensors.emplace_back("scalar", RandomTensor(at::kFloat, {}));
  tensors.emplace_back("empty", at::zeros({0, 3}, at::kBFloat16));
  tensors.emplace_back("transposed", RandomTensor(at::kFloat, {4, 6}).t());
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->entries().size(), tensors.size());
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  for (const auto& [name, expected] : tensors) {
    SCOPED_TRACE(name);
    const SafetensorsEntry* entry = file->Find(name);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->scalar_type, expected.scalar_type());
    EXPECT_EQ(entry->dtype, *SafetensorsDtypeName(expected.scalar_type()));
    absl::StatusOr<at::Tensor> loaded = file->Load(name);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->scalar_type(), expected.scalar_type());
    EXPECT_EQ(loaded->sizes(), expected.sizes());
    EXPECT_EQ(BytesOf(*loaded), BytesOf(expected));
  }
}

TEST(SafetensorsTest, LayoutFollowsTheReference) {
  const std::string path = TempDir() + "/layout.safetensors";
  NamedTensors tensors = {{"b", at::ones({3}, at::kBool)},
                          {"z", at::ones({2}, at::kFloat)},
                          {"a", at::ones({2}, at::kFloat)},
                          {"h", at::ones({1}, at::kBFloat16)},
                          {"l", at::ones({1}, at::kLong)}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t length;
  std::memcpy(&length, bytes.data(), 8);
  EXPECT_EQ(length % 8, 0u);
  // As safetensors.torch.save_file 0.8 writes it: wider dtypes first, then by name; compact JSON;
  // space padding.
  const std::string json = R"({"l":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
                           R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                           R"("z":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
                           R"("h":{"dtype":"BF16","shape":[1],"data_offsets":[24,26]},)"
                           R"("b":{"dtype":"BOOL","shape":[3],"data_offsets":[26,29]}})";
  EXPECT_EQ(bytes.substr(8, length), json + std::string(length - json.size(), ' '));
  EXPECT_EQ(bytes.size(), 8 + length + 29);
}

TEST(SafetensorsTest, ObserverSeesEachTensorsBytes) {
  NamedTensors tensors = {{"x", RandomTensor(at::kFloat, {4})},
                          {"y", RandomTensor(at::kHalf, {2, 2})}};
  std::map<std::string, std::string> seen;
  ASSERT_TRUE(WriteSafetensors(TempDir() + "/observed.safetensors", tensors, {},
                               [&](const std::string& name, absl::string_view bytes) {
                                 seen[name] = std::string(bytes);
                                 return absl::OkStatus();
                               })
                  .ok());
  EXPECT_EQ(seen["x"], BytesOf(tensors[0].second));
  EXPECT_EQ(seen["y"], BytesOf(tensors[1].second));
}

TEST(SafetensorsTest, LoadIntoCopiesInPlaceAndChecksShapes) {
  const std::string path = TempDir() + "/load_into.safetensors";
  const at::Tensor source = RandomTensor(at::kFloat, {2, 3});
  ASSERT_TRUE(WriteSafetensors(path, {{"w", source}, {"h", source.to(at::kBFloat16)}}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();

  at::Tensor same = at::zeros({2, 3});
  ASSERT_TRUE(file->LoadInto("w", same).ok());
  EXPECT_EQ(BytesOf(same), BytesOf(source));

  at::Tensor strided = at::zeros({3, 2}).t();
  ASSERT_TRUE(file->LoadInto("w", strided).ok());
  EXPECT_EQ(BytesOf(strided), BytesOf(source));

  at::Tensor widened = at::zeros({2, 3});
  ASSERT_TRUE(file->LoadInto("h", widened).ok());
  // Bytes, not equal(): the random bytes may make NaNs, which equal() never matches.
  EXPECT_EQ(BytesOf(widened), BytesOf(source.to(at::kBFloat16).to(at::kFloat)));

  at::Tensor wrong = at::zeros({3, 2});
  absl::Status status = file->LoadInto("w", wrong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'w': shape [2, 3] in the file, destination has [3, 2]"));
  EXPECT_EQ(file->LoadInto("missing", same).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(file->Load("missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, EmptyFileHasNoTensors) {
  const std::string path = TempDir() + "/none.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(file->names().empty());
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  const std::string path = TempDir() + "/bad_write.safetensors";
  const at::Tensor x = at::ones({2});
  EXPECT_THAT(WriteSafetensors(path, {{"a", x}, {"a", x}}).message(),
              HasSubstr("'a': duplicate name"));
  EXPECT_THAT(WriteSafetensors(path, {{"__metadata__", x}}).message(), HasSubstr("reserved name"));
  EXPECT_THAT(WriteSafetensors(path, {{"u", at::Tensor()}}).message(),
              HasSubstr("undefined tensor"));
  EXPECT_THAT(WriteSafetensors(path, {{"c", at::ones({2}, at::kComplexDouble)}}).message(),
              HasSubstr("no safetensors equivalent"));
  EXPECT_THAT(WriteSafetensors(path, {{std::string("\xff\xfe", 2), x}}).message(),
              HasSubstr("valid UTF-8"));
  EXPECT_FALSE(WriteSafetensors(TempDir() + "/no/such/dir/x.safetensors", {{"a", x}}).ok());
}

TEST(SafetensorsTest, OpenMissingFileNamesThePath) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(TempDir() + "/missing.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("missing.safetensors"));
}

struct MalformedCase {
  const char* label;
  std::string bytes;
  const char* expected_error;
};

TEST(SafetensorsTest, MalformedFilesGiveClearErrors) {
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  const std::string eight(8, '\0');
  std::string huge_length(8, '\0');
  huge_length[7] = '\x01';
  const MalformedCase cases[] = {
      {"empty", "", "shorter than the 8-byte header length field"},
      {"seven bytes", "abcdefg", "shorter than the 8-byte header length field"},
      {"length past EOF", RawFile("{}", "").substr(0, 9), "runs past the end of the file"},
      {"length over limit", huge_length + "{}", "exceeds the limit"},
      {"not an object start", RawFile("[]", ""), "must start with '{'"},
      {"invalid json", RawFile("{\"a\":", ""), "not valid JSON"},
      {"trailing garbage", RawFile("{} x", ""), "not valid JSON"},
      {"unknown dtype",
       RawFile(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", eight + eight),
       "tensor 'a': unknown dtype \"F128\""},
      {"negative shape",
       RawFile(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "expected non-negative integers"},
      {"float shape", RawFile(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", eight),
       "expected non-negative integers"},
      {"overflowing shape",
       RawFile(R"({"a":{"dtype":"F32","shape":[9223372036854775807,4],"data_offsets":[0,8]}})",
               eight),
       "overflows"},
      {"wrong byte count", RawFile("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,4]}})", eight),
       "hold 4 bytes, but F32 shape [2] needs 8"},
      {"overlap",
       RawFile("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 +
                   R"(,"data_offsets":[4,12]}})",
               eight + eight),
       "overlap tensor 'a'"},
      {"gap", RawFile("{\"a\":{" + f32x2 + R"(,"data_offsets":[8,16]}})", eight + eight),
       "bytes [0, 8) of the data section belong to no tensor"},
      {"past the data", RawFile("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]}})", "1234"),
       "run past the data section of 4 bytes"},
      {"uncovered tail", RawFile("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]}})", eight + "x"),
       "tensors cover 8 bytes but the data section after the header has 9"},
      {"end before begin", RawFile("{\"a\":{" + f32x2 + R"(,"data_offsets":[8,0]}})", eight),
       "end before begin"},
      {"missing offsets", RawFile("{\"a\":{" + f32x2 + "}}", ""), "expected 'data_offsets'"},
      {"three offsets", RawFile("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,4,8]}})", eight),
       "expected 'data_offsets'"},
      {"extra key", RawFile("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8],"x":1}})", eight),
       "unexpected key 'x'"},
      {"entry not object", RawFile(R"({"a":3})", ""), "tensor 'a': expected an object"},
      {"duplicate name",
       RawFile("{\"a\":{" + f32x2 + R"(,"data_offsets":[0,8]},"a":{)" + f32x2 +
                   R"(,"data_offsets":[0,8]}})",
               eight),
       "names 'a' more than once"},
      {"metadata not strings", RawFile(R"({"__metadata__":{"k":1}})", ""),
       "__metadata__: 'k': expected a string"},
      {"deeply nested",
       RawFile("{\"a\":" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}", ""),
       "tensor 'a': expected an object, got array of 1 elements"},
      {"metadata not object", RawFile(R"({"__metadata__":"x"})", ""),
       "__metadata__: expected an object"},
  };
  for (const MalformedCase& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = absl::StrCat(TempDir(), "/malformed.safetensors");
    WriteRaw(path, c.bytes);
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(file.status().message(), HasSubstr(path));
    EXPECT_THAT(file.status().message(), HasSubstr(c.expected_error));
  }
}

TEST(SafetensorsTest, EveryTruncationOrByteFlipIsRejectedOrParsedWithoutCrashing) {
  const std::string path = TempDir() + "/valid.safetensors";
  ASSERT_TRUE(
      WriteSafetensors(
          path, {{"w", RandomTensor(at::kFloat, {2, 2})}, {"b", RandomTensor(at::kBFloat16, {3})}},
          {{"format", "pt"}})
          .ok());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(ParseSafetensorsHeader(bytes, "valid").ok());
  for (size_t size = 0; size < bytes.size(); ++size) {
    EXPECT_FALSE(ParseSafetensorsHeader(absl::string_view(bytes).substr(0, size), "cut").ok())
        << "truncated to " << size << " bytes";
  }
  uint64_t header_length;
  std::memcpy(&header_length, bytes.data(), 8);
  for (size_t i = 0; i < 8 + header_length; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = bytes;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(flipped, "flipped");
      if (!header.ok()) {
        EXPECT_THAT(header.status().message(), HasSubstr("flipped: invalid safetensors file"));
      }
    }
  }
}

}  // namespace
}  // namespace titan
