#include "lib/data/test_util.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "lib/checkpoint/test_dir.h"
#include "nlohmann/json.hpp"

namespace titan {

std::vector<int32_t> ByteTokenizer::Encode(absl::string_view text, bool add_bos, bool add_eos,
                                           SpecialTokenText /*special_text*/) const {
  std::vector<int32_t> ids;
  if (add_bos) ids.push_back(kBos);
  for (char c : text) ids.push_back(static_cast<unsigned char>(c));
  if (add_eos) ids.push_back(kEos);
  return ids;
}

absl::StatusOr<std::string> ByteTokenizer::Decode(absl::Span<const int32_t> ids,
                                                  UnknownIds unknown) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= 256) {
      if (unknown == UnknownIds::kEmpty) continue;
      return absl::InvalidArgumentError("not a byte id");
    }
    text.push_back(static_cast<char>(id));
  }
  return text;
}

std::string FreshTestDir(const std::string& name) {
  const std::string dir = TestDir(name);
  std::filesystem::create_directories(dir);
  return dir;
}

void WriteTestFile(const std::string& path, absl::string_view contents, bool gzip) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  if (gzip) {
    gzFile file = gzopen(path.c_str(), "wb");
    ASSERT_NE(file, nullptr) << path;
    ASSERT_EQ(gzwrite(file, contents.data(), contents.size()), static_cast<int>(contents.size()));
    ASSERT_EQ(gzclose(file), Z_OK);
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), contents.size());
  ASSERT_TRUE(out.good()) << path;
}

std::string JsonLines(const std::vector<std::string>& texts, const std::string& field) {
  std::string lines;
  for (const std::string& text : texts) lines += nlohmann::json{{field, text}}.dump() + "\n";
  return lines;
}

std::vector<std::vector<int32_t>> ReferenceWindows(const std::vector<std::string>& texts,
                                                   int64_t seq_len) {
  std::vector<int32_t> stream;
  for (const std::string& text : texts) {
    stream.push_back(ByteTokenizer::kBos);
    for (char c : text) stream.push_back(static_cast<unsigned char>(c));
    stream.push_back(ByteTokenizer::kEos);
  }
  std::vector<std::vector<int32_t>> windows;
  for (size_t start = 0; start + seq_len + 1 <= stream.size(); start += seq_len + 1) {
    windows.emplace_back(stream.begin() + start, stream.begin() + start + seq_len + 1);
  }
  return windows;
}

}  // namespace titan
