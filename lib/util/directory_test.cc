#include "lib/util/directory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::UnorderedElementsAre;

std::string TempDir() { return std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp"; }

TEST(DirectoryTest, MakesListsAndRemovesTrees) {
  const std::string root = TempDir() + "/tree";
  ASSERT_TRUE(MakeDirectories(root + "/a/b/c").ok());
  ASSERT_TRUE(MakeDirectories(root + "/a/b/c").ok());  // Existing is fine.
  EXPECT_TRUE(IsDirectory(root + "/a/b/c"));
  std::ofstream(root + "/a/file") << "x";
  std::ofstream(root + "/a/b/c/deep") << "y";
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(root + "/a");
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_THAT(*names, UnorderedElementsAre("b", "file"));
  EXPECT_FALSE(IsDirectory(root + "/a/file"));
  EXPECT_TRUE(PathExists(root + "/a/file"));

  ASSERT_TRUE(RemoveTree(root + "/a").ok());
  EXPECT_FALSE(PathExists(root + "/a"));
  EXPECT_TRUE(RemoveTree(root + "/a").ok());  // Missing is fine.
}

TEST(DirectoryTest, RemoveTreeDoesNotFollowSymlinks) {
  const std::string root = TempDir() + "/links";
  ASSERT_TRUE(MakeDirectories(root + "/keep").ok());
  std::ofstream(root + "/keep/precious") << "z";
  ASSERT_TRUE(MakeDirectories(root + "/doomed").ok());
  ASSERT_EQ(::symlink((root + "/keep").c_str(), (root + "/doomed/link").c_str()), 0);
  ASSERT_TRUE(RemoveTree(root + "/doomed").ok());
  EXPECT_FALSE(PathExists(root + "/doomed"));
  EXPECT_TRUE(PathExists(root + "/keep/precious"));
}

TEST(DirectoryTest, FileKindSizeAndRename) {
  const std::string root = TempDir() + "/kinds";
  ASSERT_TRUE(MakeDirectories(root).ok());
  std::ofstream(root + "/five") << "12345";
  EXPECT_TRUE(IsRegularFile(root + "/five"));
  EXPECT_FALSE(IsRegularFile(root));
  EXPECT_EQ(FileSize(root + "/five"), 5);
  EXPECT_EQ(FileSize(root + "/absent"), std::nullopt);
  ASSERT_TRUE(RenamePath(root + "/five", root + "/moved").ok());
  EXPECT_FALSE(PathExists(root + "/five"));
  EXPECT_EQ(FileSize(root + "/moved"), 5);
  EXPECT_EQ(RenamePath(root + "/five", root + "/again").message(),
            root + "/five: rename to " + root + "/again failed: No such file or directory");
}

TEST(DirectoryTest, ErrorsNameThePath) {
  EXPECT_THAT(ListDirectory(TempDir() + "/absent").status().message(),
              testing::HasSubstr("absent"));
  std::ofstream(TempDir() + "/plain") << "f";
  EXPECT_FALSE(MakeDirectories(TempDir() + "/plain/sub").ok());
  // mkdir's "File exists" would read as if the folder were there.
  EXPECT_EQ(MakeDirectories(TempDir() + "/plain").message(),
            TempDir() + "/plain: is a file, not a folder (mkdir cannot make a folder there)");
}

TEST(DirectoryTest, RanksInListsEachRanksEntryWhateverTheGaps) {
  const std::string folder = std::string(std::getenv("TEST_TMPDIR")) + "/ranks_in";
  for (const char* name : {"rank_3", "rank_0", "rank_12", "rank_x", "rank_", "rank_1.abandoned-r2",
                           "rank_-1", "rank_01", "other_2"}) {
    ASSERT_TRUE(MakeDirectories(folder + "/" + name).ok());
  }
  EXPECT_EQ(RanksIn(folder, "rank_", ""), (std::vector<int>{0, 3, 12}));
  std::ofstream(folder + "/rollouts_rank2.jsonl").close();
  EXPECT_EQ(RanksIn(folder, "rollouts_rank", ".jsonl"), (std::vector<int>{2}));
  EXPECT_TRUE(RanksIn(folder + "/missing", "rank_", "").empty());
}

}  // namespace
}  // namespace titan
