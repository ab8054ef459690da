#include "lib/metrics/tensorboard_writer.h"

#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lib/metrics/crc32c.h"
#include "lib/metrics/event.pb.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

uint64_t ReadLittleEndian(const std::string& bytes, size_t offset, int num_bytes) {
  uint64_t value = 0;
  for (int i = 0; i < num_bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[offset + i])) << (8 * i);
  }
  return value;
}

// Splits a TFRecord file into its payloads, failing the test on a bad length or CRC.
std::vector<std::string> ParseTfRecords(const std::string& contents) {
  std::vector<std::string> records;
  size_t offset = 0;
  while (offset < contents.size()) {
    EXPECT_LE(offset + 12, contents.size()) << "truncated header at " << offset;
    if (offset + 12 > contents.size()) break;
    const uint64_t length = ReadLittleEndian(contents, offset, 8);
    EXPECT_EQ(ReadLittleEndian(contents, offset + 8, 4), MaskedCrc32c(contents.substr(offset, 8)))
        << "length CRC at " << offset;
    EXPECT_LE(offset + 16 + length, contents.size()) << "truncated record at " << offset;
    if (offset + 16 + length > contents.size()) break;
    std::string data = contents.substr(offset + 12, length);
    EXPECT_EQ(ReadLittleEndian(contents, offset + 12 + length, 4), MaskedCrc32c(data))
        << "data CRC at " << offset;
    records.push_back(std::move(data));
    offset += 16 + length;
  }
  return records;
}

std::string TestDir(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(EncodeTfRecordTest, FramesLengthDataAndCrcs) {
  const std::string record = EncodeTfRecord("abc");
  ASSERT_EQ(record.size(), 3u + 16u);
  EXPECT_EQ(ReadLittleEndian(record, 0, 8), 3u);
  EXPECT_EQ(record.substr(12, 3), "abc");
  const std::vector<std::string> records = ParseTfRecords(record + EncodeTfRecord(""));
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0], "abc");
  EXPECT_EQ(records[1], "");
}

TEST(TensorBoardWriterTest, WritesFileVersionThenScalars) {
  const std::string dir = TestDir("tb/run1");
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Create(dir);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddScalar("loss_metrics/global_avg_loss", 5.25f, 1).ok());
  ASSERT_TRUE((*writer)->AddScalar("lr", 8e-4f, 1).ok());
  ASSERT_TRUE((*writer)->AddScalar("loss_metrics/global_avg_loss", 4.5f, 2).ok());
  ASSERT_TRUE((*writer)->Flush().ok());

  const std::string path = (*writer)->path();
  EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(dir));
  char host[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(::gethostname(host, sizeof(host) - 1), 0);
  const std::string name = std::filesystem::path(path).filename();
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  const std::string suffix = std::string(".") + host;
  ASSERT_GT(name.size(), prefix.size() + suffix.size());
  EXPECT_EQ(name.substr(name.size() - suffix.size()), suffix);
  const std::string seconds =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  EXPECT_EQ(seconds.find_first_not_of("0123456789"), std::string::npos) << seconds;

  absl::StatusOr<std::string> contents = ReadFile(path);
  ASSERT_TRUE(contents.ok()) << contents.status();
  const std::vector<std::string> records = ParseTfRecords(*contents);
  ASSERT_EQ(records.size(), 4u);

  tensorboard::Event event;
  ASSERT_TRUE(event.ParseFromString(records[0]));
  EXPECT_EQ(event.file_version(), "brain.Event:2");
  EXPECT_GT(event.wall_time(), 1.6e9);

  struct Expected {
    const char* tag;
    float value;
    int64_t step;
  };
  const Expected expected[] = {{"loss_metrics/global_avg_loss", 5.25f, 1},
                               {"lr", 8e-4f, 1},
                               {"loss_metrics/global_avg_loss", 4.5f, 2}};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(event.ParseFromString(records[i + 1]));
    EXPECT_EQ(event.step(), expected[i].step);
    ASSERT_TRUE(event.has_summary());
    ASSERT_EQ(event.summary().value_size(), 1);
    EXPECT_EQ(event.summary().value(0).tag(), expected[i].tag);
    EXPECT_EQ(event.summary().value(0).simple_value(), expected[i].value);
  }
}

TEST(TensorBoardWriterTest, DestructorFlushesPendingRecords) {
  const std::string dir = TestDir("tb/run2");
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Create(dir);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->AddScalar("grad_norm", 1.5f, 7).ok());
    path = (*writer)->path();
  }
  absl::StatusOr<std::string> contents = ReadFile(path);
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_EQ(ParseTfRecords(*contents).size(), 2u);
}

TEST(TensorBoardWriterTest, CreateFailsWhenFolderIsAFile) {
  const std::string file = TestDir("not_a_folder");
  ASSERT_TRUE(WriteFileAtomically(file, "x").ok());
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> writer = TensorBoardWriter::Create(file);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find(file), absl::string_view::npos) << writer.status();
}

}  // namespace
}  // namespace titan
