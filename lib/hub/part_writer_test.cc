#include "lib/hub/part_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

std::string RandomBytes(size_t size) {
  std::mt19937 random(7);
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  return bytes;
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

// Feeds `content` in libcurl-like pieces of uneven sizes; returns the first error.
absl::Status AppendInPieces(PartWriter& writer, const std::string& content) {
  size_t offset = 0;
  for (size_t piece = 1; offset < content.size(); piece = piece * 7 % 16411 + 1) {
    const size_t take = std::min(piece, content.size() - offset);
    if (absl::Status status = writer.Append(absl::string_view(content).substr(offset, take));
        !status.ok()) {
      return status;
    }
    offset += take;
  }
  return absl::OkStatus();
}

TEST(PartWriterTest, BlocksLandOnDiskInOrderAndOnWrittenSeesThem) {
  const std::string path = TempPath("big.part");
  const std::string head = "already here";
  ASSERT_TRUE(WriteFileAtomically(path, head).ok());
  const std::string content = RandomBytes(3 * PartWriter::kBlockSize + 12345);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  std::string seen;
  int calls = 0;
  PartWriter writer(path, fd, head.size(), head.size() + content.size(),
                    [&](absl::string_view block) {
                      seen.append(block.data(), block.size());
                      ++calls;
                    });
  ASSERT_TRUE(AppendInPieces(writer, content).ok());
  EXPECT_EQ(writer.accepted(), static_cast<int64_t>(content.size()));
  ASSERT_TRUE(writer.Finish().ok());
  ASSERT_EQ(::close(fd), 0);
  EXPECT_EQ(writer.written(), static_cast<int64_t>(content.size()));
  EXPECT_EQ(calls, 4);  // three full blocks and the tail
  EXPECT_TRUE(seen == content);
  absl::StatusOr<std::string> on_disk = ReadFile(path);
  ASSERT_TRUE(on_disk.ok());
  EXPECT_TRUE(*on_disk == head + content);
}

TEST(PartWriterTest, SmallBodyIsWrittenByFinish) {
  const std::string path = TempPath("small.part");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  std::string seen;
  PartWriter writer(path, fd, 0, 5,
                    [&](absl::string_view block) { seen.append(block.data(), block.size()); });
  ASSERT_TRUE(writer.Append("hello").ok());
  EXPECT_EQ(writer.written(), 0);
  ASSERT_TRUE(writer.Finish().ok());
  ASSERT_TRUE(writer.Finish().ok());  // idempotent
  ::close(fd);
  EXPECT_EQ(writer.written(), 5);
  EXPECT_EQ(seen, "hello");
  EXPECT_EQ(*ReadFile(path), "hello");
}

TEST(PartWriterTest, WriteErrorStopsAppendAndNothingCountsAsWritten) {
  const std::string path = TempPath("readonly.part");
  ASSERT_TRUE(WriteFileAtomically(path, "").ok());
  const int fd = ::open(path.c_str(), O_RDONLY);  // every write fails
  ASSERT_GE(fd, 0);
  int calls = 0;
  PartWriter writer(path, fd, 0, -1, [&](absl::string_view) { ++calls; });
  const absl::Status appended = AppendInPieces(
      writer, RandomBytes((PartWriter::kMaxQueuedBlocks + 3) * PartWriter::kBlockSize));
  EXPECT_FALSE(appended.ok());  // the queue filled up behind the failed block
  const absl::Status finished = writer.Finish();
  ::close(fd);
  EXPECT_FALSE(finished.ok());
  EXPECT_THAT(finished.message(), HasSubstr(path));
  EXPECT_EQ(writer.written(), 0);
  EXPECT_EQ(calls, 0);
}

TEST(PartWriterTest, DiskFullSaysHowMuchIsMissing) {
  const int fd = ::open("/dev/full", O_WRONLY | O_APPEND);  // every write is ENOSPC
  if (fd < 0) GTEST_SKIP() << "no /dev/full";
  PartWriter writer("model.part", fd, int64_t{1} << 20, int64_t{3} << 20, [](absl::string_view) {});
  ASSERT_TRUE(writer.Append("x").ok());
  const absl::Status status = writer.Finish();
  ::close(fd);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("model.part: disk full after 1.0 MiB of 3.0 MiB; "
                                          "free at least 2.0 MiB more"));
}

}  // namespace
}  // namespace titan
