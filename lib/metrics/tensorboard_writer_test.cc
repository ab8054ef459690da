#include "lib/metrics/tensorboard_writer.h"

#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/metrics/event.pb.h"
#include "lib/metrics/event_file_reader.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

std::string TestDir(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

TEST(EncodeTfRecordTest, FramesLengthDataAndCrcs) {
  const std::string record = EncodeTfRecord("abc");
  ASSERT_EQ(record.size(), 3u + 16u);
  EXPECT_EQ(record.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(record.substr(12, 3), "abc");
  absl::StatusOr<std::vector<std::string>> records =
      DecodeTfRecords(record + EncodeTfRecord(""));
  ASSERT_TRUE(records.ok()) << records.status();
  EXPECT_EQ(*records, (std::vector<std::string>{"abc", ""}));
}

TEST(EncodeTfRecordTest, CorruptionIsDetected) {
  std::string record = EncodeTfRecord("abc");
  record[13] = 'X';
  EXPECT_FALSE(DecodeTfRecords(record).ok());
  record = EncodeTfRecord("abc");
  record[0] = 4;
  EXPECT_FALSE(DecodeTfRecords(record).ok());
  EXPECT_FALSE(DecodeTfRecords(EncodeTfRecord("abc").substr(0, 17)).ok());
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
  // events.out.tfevents.<seconds>.<host>.<pid>.<count>, as torch's SummaryWriter names them.
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  const std::string host_pid = absl::StrCat(".", host, ".", ::getpid(), ".");
  const size_t at = name.find(host_pid, prefix.size());
  ASSERT_NE(at, std::string::npos) << name;
  const std::string seconds = name.substr(prefix.size(), at - prefix.size());
  EXPECT_EQ(seconds.find_first_not_of("0123456789"), std::string::npos) << seconds;
  const std::string count = name.substr(at + host_pid.size());
  ASSERT_FALSE(count.empty());
  EXPECT_EQ(count.find_first_not_of("0123456789"), std::string::npos) << count;

  absl::StatusOr<std::vector<tensorboard::Event>> events = ReadEventFile(path);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 4u);
  EXPECT_EQ((*events)[0].file_version(), "brain.Event:2");
  EXPECT_GT((*events)[0].wall_time(), 1.6e9);

  struct Expected {
    const char* tag;
    float value;
    int64_t step;
  };
  const Expected expected[] = {{"loss_metrics/global_avg_loss", 5.25f, 1},
                               {"lr", 8e-4f, 1},
                               {"loss_metrics/global_avg_loss", 4.5f, 2}};
  for (int i = 0; i < 3; ++i) {
    const tensorboard::Event& event = (*events)[i + 1];
    EXPECT_EQ(event.step(), expected[i].step);
    EXPECT_GE(event.wall_time(), (*events)[0].wall_time());
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
  absl::StatusOr<std::vector<tensorboard::Event>> events = ReadEventFile(path);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[1].summary().value(0).tag(), "grad_norm");
}

// Two writers of one folder in the same second (two runs naming one folder, a writer made again)
// write files of their own: appended to one file their points interleaved in one series.
TEST(TensorBoardWriterTest, TwoWritersOfOneFolderWriteFilesOfTheirOwn) {
  const std::string dir = TestDir("tb/shared");
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> first = TensorBoardWriter::Create(dir);
  absl::StatusOr<std::unique_ptr<TensorBoardWriter>> second = TensorBoardWriter::Create(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE((*first)->path(), (*second)->path());
  ASSERT_TRUE((*first)->AddScalar("lr", 1.0f, 1).ok());
  ASSERT_TRUE((*second)->AddScalar("lr", 2.0f, 1).ok());
  for (const auto& [writer, value] : {std::pair(first->get(), 1.0f), {second->get(), 2.0f}}) {
    ASSERT_TRUE(writer->Flush().ok());
    absl::StatusOr<std::vector<tensorboard::Event>> events = ReadEventFile(writer->path());
    ASSERT_TRUE(events.ok()) << events.status();
    ASSERT_EQ(events->size(), 2u) << writer->path();
    EXPECT_EQ((*events)[1].summary().value(0).simple_value(), value);
  }
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
