#include "lib/hub/file_downloader.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/util/directory.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

constexpr char kHelloSha256[] =  // sha256("hello")
    "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
constexpr char kHellOSha256[] =  // sha256("hellO")
    "04a6f55face2f46be8c23f627d539827615851e10751b63ec59db6d2c706b770";

class CheckInPlaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.local_dir = ::testing::TempDir() + "/" +
                         ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_TRUE(MakeDirectories(options_.local_dir).ok());
    options_.progress_out = nullptr;
    file_.path = "a.bin";
    file_.size = 5;
    file_.sha256 = kHelloSha256;
    path_ = options_.local_dir + "/a.bin";
  }

  absl::Status Check(bool verify) {
    DownloadOptions options = options_;
    options.verify = verify;
    return FileDownloader(options).CheckInPlace(file_);
  }

  // Overwrites the file, then puts its mtime back, as a change a size and mtime check misses.
  void WriteKeepingMtime(const std::string& content) {
    struct stat st;
    ASSERT_EQ(::stat(path_.c_str(), &st), 0);
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << content;
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    ASSERT_EQ(::utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
  }

  DownloadOptions options_;
  RemoteFile file_;
  std::string path_;
};

TEST_F(CheckInPlaceTest, SaysWhyAFileIsNotInPlace) {
  const absl::Status missing = Check(false);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.message(), path_ + " is missing");
  std::ofstream(path_, std::ios::binary) << "hello!";
  const absl::Status size = Check(false);
  EXPECT_EQ(size.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(size.message(), path_ + " has 6 bytes, the listing says 5");
  std::ofstream(path_, std::ios::binary | std::ios::trunc) << "hellO";
  const absl::Status digest = Check(false);
  EXPECT_EQ(digest.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(digest.message(),
            path_ + ": sha256 mismatch: expected " + kHelloSha256 + ", got " + kHellOSha256);
}

TEST_F(CheckInPlaceTest, AFileThatFailsVerificationIsNoLongerTrusted) {
  std::ofstream(path_, std::ios::binary) << "hello";
  ASSERT_TRUE(Check(false).ok());  // hashed, and recorded by size and mtime
  WriteKeepingMtime("hellO");
  EXPECT_TRUE(Check(false).ok());  // the record is trusted, as huggingface_hub does
  EXPECT_EQ(Check(true).code(), absl::StatusCode::kDataLoss);
  // Without its record the next plain check hashes the file again.
  EXPECT_THAT(std::string(Check(false).message()), HasSubstr("sha256 mismatch"));
  WriteKeepingMtime("hello");
  EXPECT_TRUE(Check(false).ok());
}

TEST_F(CheckInPlaceTest, ARecordWithFieldsOfAnotherTypeIsIgnoredNotThrown) {
  std::ofstream(path_, std::ios::binary) << "hello";
  const std::string record_path = options_.local_dir + "/" + kDownloadStateDir + "/a.bin.meta.json";
  ASSERT_TRUE(MakeDirectories(options_.local_dir + "/" + kDownloadStateDir).ok());
  for (const char* record : {R"({"size": "5", "mtime_ns": 1, "digest": "x"})",
                             R"({"size": 5, "mtime_ns": "1", "digest": 7})"}) {
    SCOPED_TRACE(record);
    std::ofstream(record_path, std::ios::trunc) << record;
    // As without a record: hashed, and a new record written.
    EXPECT_TRUE(Check(false).ok());
    EXPECT_TRUE(Check(false).ok());  // now by the new record
  }
  // A file without digest in the listing takes the sha256 a record holds, of any type too.
  file_.sha256.clear();
  std::ofstream(record_path, std::ios::trunc) << R"({"size": 5, "digest": ["x"]})";
  EXPECT_TRUE(Check(false).ok());  // on its size alone
}

TEST_F(CheckInPlaceTest, VerifyWarnsOfAFileWithNoDigestEvenWhenProgressIsOff) {
  std::ofstream(path_, std::ios::binary) << "hello";
  file_.sha256.clear();
  char* printed = nullptr;
  size_t printed_size = 0;
  FILE* warnings = ::open_memstream(&printed, &printed_size);
  ASSERT_NE(warnings, nullptr);
  options_.warning_out = warnings;  // progress_out stays nullptr (--progress=none)
  for (const bool verify : {false, true}) {
    DownloadOptions options = options_;
    options.verify = verify;
    std::string warning;
    EXPECT_TRUE(FileDownloader(options).CheckInPlace(file_, &warning).ok());
    // A plain run takes it on its size silently; --verify says it could not hash it.
    EXPECT_EQ(warning, verify ? "not verified: neither the listing nor its record gives a sha256 "
                                "or git blob id for --verify to hash it by; only its size was "
                                "checked"
                              : "");
  }
  ASSERT_EQ(std::fclose(warnings), 0);
  EXPECT_EQ(std::string(printed, printed_size),
            "a.bin: not verified: neither the listing nor its record gives a sha256 or git blob "
            "id for --verify to hash it by; only its size was checked\n");
  std::free(printed);
}

TEST_F(CheckInPlaceTest, APartRecordWithFieldsOfAnotherTypeStartsThePartFileOver) {
  const std::string state = options_.local_dir + "/" + kDownloadStateDir;
  ASSERT_TRUE(MakeDirectories(state).ok());
  std::ofstream(state + "/a.bin.part", std::ios::binary) << "hel";
  std::ofstream(state + "/a.bin.part.json") << R"({"size": "5", "digest": 1})";
  EXPECT_EQ(FileDownloader(options_).PartSize(file_), 0);  // not this version's: not resumed
  std::ofstream(state + "/a.bin.part.json", std::ios::trunc)
      << R"({"size": 5, "digest": ")" << kHelloSha256 << R"("})";
  EXPECT_EQ(FileDownloader(options_).PartSize(file_), 3);
}

}  // namespace
}  // namespace titan
