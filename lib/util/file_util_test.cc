#include "lib/util/file_util.h"

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <utility>

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

TEST(FileUtilTest, ReadFileOfDirectoryNamesIt) {
  absl::StatusOr<std::string> read = ReadFile(TempDir());
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(std::string(read.status().message()), TempDir() + ": open failed: Is a directory");
}

TEST(FileUtilTest, AtomicWriterDroppedWithoutCommitKeepsTheOldFile) {
  const std::string path = TempDir() + "/dropped.txt";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  std::string temp_path;
  {
    absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE(writer->Write("half of the new").ok());
    temp_path = writer->temp_path();
    EXPECT_EQ(*ReadFile(temp_path), "half of the new");
  }
  EXPECT_EQ(*ReadFile(path), "old");
  EXPECT_FALSE(ReadFile(temp_path).ok());
}

TEST(FileUtilTest, AtomicWriterWritesOnceAndCommitsOnce) {
  const std::string path = TempDir() + "/committed.txt";
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(writer->Write("ab").ok());
  ASSERT_TRUE(writer->Write("cd").ok());
  AtomicFileWriter moved = *std::move(writer);
  ASSERT_TRUE(moved.Commit().ok());
  EXPECT_EQ(*ReadFile(path), "abcd");
  EXPECT_EQ(moved.Commit().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(moved.Write("e").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*ReadFile(path), "abcd");
}

TEST(FileUtilTest, DirnameOfRelativeRootAndNestedPaths) {
  EXPECT_EQ(Dirname("file"), ".");
  EXPECT_EQ(Dirname("/file"), "/");
  EXPECT_EQ(Dirname("a/b/file"), "a/b");
  EXPECT_EQ(Dirname("/a/file"), "/a");
  EXPECT_EQ(Basename("a/b/file"), "file");
  EXPECT_EQ(Basename("file"), "file");
}

// As std::filesystem::path's / (and os.path.join) join them.
TEST(FileUtilTest, JoinPathKeepsAnAbsoluteName) {
  EXPECT_EQ(JoinPath("out", "traces"), "out/traces");
  EXPECT_EQ(JoinPath("out/", "traces"), "out/traces");
  EXPECT_EQ(JoinPath("out", "/abs/traces"), "/abs/traces");
  EXPECT_EQ(JoinPath("", "traces"), "traces");
}

TEST(FileUtilTest, PathPartsReadAsTheFileSystemDoes) {
  EXPECT_EQ(PathParts("a//./b/"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(PathParts("/x/y"), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(PathParts("./."), std::vector<std::string>{});
  EXPECT_EQ(PathParts("a/../b"), std::nullopt);
  EXPECT_EQ(PathParts(".."), std::nullopt);
  EXPECT_EQ(PathParts("a/..b/c"), (std::vector<std::string>{"a", "..b", "c"}));
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
