#include "lib/hub/part_writer.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <future>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
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

FileStamp Stamp(int fd) {
  absl::StatusOr<FileStamp> stamp = FileStamp::OfFd(fd, "part");
  EXPECT_TRUE(stamp.ok()) << stamp.status();
  return stamp.value_or(FileStamp());
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
  PartWriter writer(path, fd, Stamp(fd), head.size(), head.size() + content.size(),
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
  PartWriter writer(path, fd, Stamp(fd), 0, 5,
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
  PartWriter writer(path, fd, Stamp(fd), 0, -1, [&](absl::string_view) { ++calls; });
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

// Overwrites the first byte of `path` in place through a descriptor of its own, as another
// process would: same size, same inode.
void RewriteFirstByte(const std::string& path) {
  absl::SleepFor(absl::Milliseconds(20));  // past a coarse timestamp clock's tick
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "!", 1, 0), 1);
  ::close(fd);
}

TEST(PartWriterTest, AWriteAfterAnotherProcessRewroteTheFileIsRefused) {
  const std::string path = TempPath("rewritten.part");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  std::promise<void> first_block_written;
  int calls = 0;
  PartWriter writer(path, fd, Stamp(fd), 0, -1, [&](absl::string_view) {
    if (++calls == 1) first_block_written.set_value();
  });
  const std::string content = RandomBytes(2 * PartWriter::kBlockSize);
  ASSERT_TRUE(writer.Append(absl::string_view(content).substr(0, PartWriter::kBlockSize)).ok());
  first_block_written.get_future().wait();
  RewriteFirstByte(path);
  writer.Append(absl::string_view(content).substr(PartWriter::kBlockSize)).IgnoreError();
  const absl::Status status = writer.Finish();
  ::close(fd);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_THAT(status.message(),
              HasSubstr(path + ": the part file was rewritten in place (its ctime or mtime moved) "
                               "during the download"));
  EXPECT_EQ(calls, 1);  // the digest never sees the block that was not written
  EXPECT_EQ(writer.written(), static_cast<int64_t>(PartWriter::kBlockSize));
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, static_cast<off_t>(PartWriter::kBlockSize));
}

TEST(PartWriterTest, AChangeBeforeTheFirstWriteIsRefusedAndStampsFollowOwnWrites) {
  const std::string path = TempPath("stamped.part");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  const FileStamp created = Stamp(fd);
  FileStamp after_first;
  {
    PartWriter writer(path, fd, created, 0, -1, [](absl::string_view) {});
    ASSERT_TRUE(writer.Append("hello").ok());
    ASSERT_TRUE(writer.Finish().ok());
    after_first = writer.stamp();
    EXPECT_EQ(after_first.size, 5);
    EXPECT_EQ(ChangeSince(after_first, Stamp(fd)), "");  // its own write moved the stamp
  }
  RewriteFirstByte(path);
  PartWriter writer(path, fd, after_first, 5, -1, [](absl::string_view) {});
  ASSERT_TRUE(writer.Append(" world").ok());
  const absl::Status status = writer.Finish();
  ::close(fd);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_EQ(*ReadFile(path), "!ello");
}

TEST(PartWriterTest, AWriteThatFailsHalfwayStillMovesTheStamp) {
  const std::string path = TempPath("limited.part");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
  ASSERT_GE(fd, 0);
  // A file size limit cuts the block's write() short at 1000 bytes, then fails it with EFBIG.
  struct rlimit limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &limit), 0);
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < 4096) GTEST_SKIP() << "low RLIMIT_FSIZE";
  const struct rlimit lowered = {1000, limit.rlim_max};
  void (*previous)(int) = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lowered), 0);
  PartWriter writer(path, fd, Stamp(fd), 0, -1, [](absl::string_view) {});
  ASSERT_TRUE(writer.Append(RandomBytes(2000)).ok());
  const absl::Status status = writer.Finish();
  ::setrlimit(RLIMIT_FSIZE, &limit);
  ::signal(SIGXFSZ, previous);
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(writer.written(), 0);
  // The 1000 bytes it did write are its own change, not another process's.
  EXPECT_EQ(writer.stamp().size, 1000);
  EXPECT_EQ(ChangeSince(writer.stamp(), Stamp(fd)), "");
  ::close(fd);
}

TEST(PartWriterTest, ChangeSinceSaysWhatChanged) {
  FileStamp before;
  before.device = 1;
  before.inode = 2;
  before.links = 1;
  before.size = 10;
  before.mtime = {100, 5};
  before.ctime = {100, 5};
  FileStamp now = before;
  EXPECT_EQ(ChangeSince(before, now), "");
  now.ctime.tv_nsec = 6;
  EXPECT_EQ(ChangeSince(before, now), "was rewritten in place (its ctime or mtime moved)");
  now.size = 110;
  EXPECT_EQ(ChangeSince(before, now), "changed size (10 bytes, now 110)");
  now.links = 0;
  EXPECT_EQ(ChangeSince(before, now), "was replaced or deleted");
  now = before;
  now.inode = 3;
  EXPECT_EQ(ChangeSince(before, now), "was replaced or deleted");
}

TEST(PartWriterTest, DiskFullSaysHowMuchIsMissing) {
  const int fd = ::open("/dev/full", O_WRONLY | O_APPEND);  // every write is ENOSPC
  if (fd < 0) GTEST_SKIP() << "no /dev/full";
  PartWriter writer("model.part", fd, Stamp(fd), int64_t{1} << 20, int64_t{3} << 20,
                    [](absl::string_view) {});
  ASSERT_TRUE(writer.Append("x").ok());
  const absl::Status status = writer.Finish();
  ::close(fd);
  EXPECT_TRUE(absl::IsResourceExhausted(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("model.part: disk full after 1.0 MiB of 3.0 MiB; "
                                          "free at least 2.0 MiB more"));
}

}  // namespace
}  // namespace titan
