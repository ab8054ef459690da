#include "lib/util/file_util.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace titan {
namespace {

std::string TempDir() { return std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp"; }

TEST(FileUtilTest, AtomicWriteReplacesContentsAndLeavesNoTempFile) {
  const std::string path = TempDir() + "/atomic.txt";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  absl::StatusOr<std::string> read = ReadFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "second");
  EXPECT_FALSE(ReadFile(path + ".tmp." + std::to_string(::getpid())).ok());
}

TEST(FileUtilTest, ReadMissingFileNamesThePath) {
  absl::StatusOr<std::string> read = ReadFile("/nonexistent/titan/file");
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("/nonexistent/titan/file"), std::string::npos);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
}

TEST(FileUtilTest, WriteIntoMissingDirectoryFails) {
  EXPECT_FALSE(WriteFileAtomically("/nonexistent/titan/file", "x").ok());
}

}  // namespace
}  // namespace titan
