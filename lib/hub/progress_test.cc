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

}  // namespace
}  // namespace titan
