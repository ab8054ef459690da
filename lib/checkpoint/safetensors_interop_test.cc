// Byte compatibility with PyPI safetensors, both ways. Arguments: the test environment's python3
// and safetensors_reference.py.

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/safetensors.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

std::string g_python;
std::string g_reference_script;

std::string TempDir() { return std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp"; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string HexOf(const at::Tensor& tensor) {
  at::Tensor contiguous = tensor.contiguous();
  return absl::BytesToHexString(
      absl::string_view(static_cast<const char*>(contiguous.data_ptr()), contiguous.nbytes()));
}

// Runs safetensors_reference.py with `args`; fails the test when it exits non-zero.
void RunReference(const std::string& args) {
  const std::string command = absl::StrCat("'", g_python, "' '", g_reference_script, "' ", args);
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
}

at::Tensor RandomBits(at::ScalarType type, int64_t rows, int64_t cols) {
  if (type == at::kBool) return at::randint(0, 2, {rows, cols}, at::kByte).to(at::kBool);
  return at::randint(0, 256, {rows, cols * static_cast<int64_t>(c10::elementSize(type))}, at::kByte)
      .view(type);
}

TEST(SafetensorsInteropTest, PythonReadsOurFilesAndRewritesThemByteForByte) {
  const std::string ours = TempDir() + "/ours.safetensors";
  const std::string theirs = TempDir() + "/resaved.safetensors";
  const std::string dump = TempDir() + "/resaved.json";
  NamedTensors tensors;
  for (const char* dtype :
       {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2",
        "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64", "U64", "U32", "U16"}) {
    tensors.emplace_back(absl::StrCat("model.", dtype),
                         RandomBits(*ScalarTypeFromSafetensorsDtype(dtype), 3, 4));
  }
  tensors.emplace_back("scalar", at::tensor(2.5).to(at::kBFloat16).reshape({}));
  tensors.emplace_back("empty", at::zeros({0, 7}, at::kHalf));
  tensors.emplace_back("transposed", RandomBits(at::kBFloat16, 5, 3).t());
  ASSERT_TRUE(WriteSafetensors(ours, tensors, {{"format", "pt"}}).ok());

  ASSERT_NO_FATAL_FAILURE(
      RunReference(absl::StrCat("resave '", ours, "' '", theirs, "' '", dump, "'")));
  const nlohmann::json loaded = nlohmann::json::parse(ReadAll(dump));
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(loaded.contains(name));
    EXPECT_EQ(loaded[name]["dtype"], *SafetensorsDtypeName(tensor.scalar_type()));
    EXPECT_EQ(loaded[name]["shape"].get<std::vector<int64_t>>(), tensor.sizes().vec());
    EXPECT_EQ(loaded[name]["hex"], HexOf(tensor));
  }
  EXPECT_EQ(ReadAll(theirs), ReadAll(ours));
}

TEST(SafetensorsInteropTest, WeReadPythonsFilesBitwise) {
  const std::string theirs = TempDir() + "/python.safetensors";
  const std::string dump = TempDir() + "/python.json";
  ASSERT_NO_FATAL_FAILURE(RunReference(absl::StrCat("write '", theirs, "' '", dump, "'")));
  const nlohmann::json written = nlohmann::json::parse(ReadAll(dump));

  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(theirs);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  const std::vector<std::string> names = file->names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), written.size());
  for (const auto& [name, expected] : written.items()) {
    SCOPED_TRACE(name);
    const SafetensorsEntry* entry = file->Find(name);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->dtype, expected["dtype"]);
    absl::StatusOr<at::Tensor> tensor = file->Load(name);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_EQ(tensor->sizes().vec(), expected["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(HexOf(*tensor), expected["hex"]);
  }
  // The bf16 tensor the reference wrote by value, not by bits: 3.5 survives exactly.
  absl::StatusOr<at::Tensor> scalar = file->Load("scalar");
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->scalar_type(), at::kBFloat16);
  EXPECT_EQ(scalar->item<float>(), 3.5f);
}

}  // namespace
}  // namespace titan

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::cerr << "usage: " << argv[0] << " PYTHON3 SAFETENSORS_REFERENCE_PY\n";
    return 2;
  }
  titan::g_python = argv[1];
  titan::g_reference_script = argv[2];
  return RUN_ALL_TESTS();
}
