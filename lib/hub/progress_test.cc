#include "lib/hub/progress.h"

#include <cstdio>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(HumanBytesTest, PicksBinaryUnits) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(int64_t{3} << 30), "3.0 GiB");
}

std::string ReadAll(FILE* file) {
  std::rewind(file);
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), file)) > 0;) text.append(buffer, n);
  return text;
}

TEST(ProgressReporterTest, PlainLinesWithoutEscapes) {
  FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    ProgressReporter progress(out, /*terminal=*/false, 2048);
    progress.Start("a.bin", 2048, 0);
    progress.Advance("a.bin", 1024);
    progress.Note("a.bin", "retry 1 at byte 1024: reset");
    progress.Advance("a.bin", 1024);
    progress.Finish("a.bin", "done, verified");
  }
  const std::string text = ReadAll(out);
  std::fclose(out);
  EXPECT_THAT(text, HasSubstr("a.bin: downloading 2.0 KiB\n"));
  EXPECT_THAT(text, HasSubstr("a.bin: retry 1 at byte 1024: reset\n"));
  EXPECT_THAT(text, HasSubstr("a.bin: done, verified (2.0 KiB"));
  EXPECT_THAT(text, HasSubstr("total: 2.0 KiB / 2.0 KiB (100%)"));
  EXPECT_THAT(text, Not(HasSubstr("\x1b[")));
}

// A part file as long as the remote file but with the wrong digest is deleted and fetched again:
// the run's total grows by what was on disk, not stays at the 0 bytes planned.
TEST(ProgressReporterTest, TotalCountsBytesOnDiskThatMustBeFetchedAgain) {
  FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    ProgressReporter progress(out, /*terminal=*/false, 0);
    progress.Start("a.bin", 4096, 4096);
    progress.Rewind("a.bin", 0);
    progress.Advance("a.bin", 4096);
    progress.Finish("a.bin", "done, verified");
  }
  const std::string text = ReadAll(out);
  std::fclose(out);
  EXPECT_THAT(text, HasSubstr("total: 4.0 KiB / 4.0 KiB (100%)"));
}

// A resumed file restarted from 0: the bytes fetched before drop out of the done count, and the
// resumed-from kilobyte joins the total.
TEST(ProgressReporterTest, RewindOfResumedFileAddsWhatWasOnDisk) {
  FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  {
    ProgressReporter progress(out, /*terminal=*/false, 3072);
    progress.Start("a.bin", 4096, 1024);
    progress.Advance("a.bin", 2048);
    progress.Rewind("a.bin", 0);
    progress.Advance("a.bin", 4096);
    progress.Finish("a.bin", "done, verified");
  }
  const std::string text = ReadAll(out);
  std::fclose(out);
  EXPECT_THAT(text, HasSubstr("total: 4.0 KiB / 4.0 KiB (100%)"));
}

}  // namespace
}  // namespace titan
