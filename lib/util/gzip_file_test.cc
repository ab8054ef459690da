#include "lib/util/gzip_file.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

std::string TempDir() { return std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp"; }

// Over one read/write chunk (1 MiB), not all alike, so a chunking bug shows.
std::string Contents() {
  std::string text;
  for (int i = 0; text.size() < (3 << 20); ++i) text += std::to_string(i * 7919) + ",";
  return text;
}

TEST(GzipFileTest, GzipDecompressesToTheOriginalAndRemovesIt) {
  const std::string plain = TempDir() + "/trace.json";
  const std::string packed = plain + ".gz";
  ASSERT_TRUE(WriteFileAtomically(plain, Contents()).ok());
  const absl::Status status = GzipFile(plain, packed);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_FALSE(ReadFile(plain).ok());
  EXPECT_FALSE(ReadFile(packed + ".tmp." + std::to_string(::getpid())).ok());
  absl::StatusOr<std::string> raw = ReadFile(packed);
  ASSERT_TRUE(raw.ok());
  ASSERT_GE(raw->size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>((*raw)[0]), 0x1f);  // the gzip magic
  EXPECT_EQ(static_cast<unsigned char>((*raw)[1]), 0x8b);
  EXPECT_LT(raw->size(), Contents().size() / 2);
  // Debian's gzip, an independent decoder, reads it back.
  const std::string unpacked = TempDir() + "/unpacked.json";
  ASSERT_EQ(std::system(("gzip -dc " + packed + " > " + unpacked).c_str()), 0);
  absl::StatusOr<std::string> back = ReadFile(unpacked);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, Contents());
  absl::StatusOr<std::string> read = ReadPlainOrGzipFile(packed);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, Contents());
}

TEST(GzipFileTest, ReadsPlainFilesAsTheyAre) {
  const std::string plain = TempDir() + "/plain.json";
  ASSERT_TRUE(WriteFileAtomically(plain, Contents()).ok());
  absl::StatusOr<std::string> read = ReadPlainOrGzipFile(plain);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, Contents());
}

TEST(GzipFileTest, CutShortGzipIsRefused) {
  // As Python's gzip ("Compressed file ended before the end-of-stream marker was reached").
  const std::string plain = TempDir() + "/cut.json";
  const std::string packed = plain + ".gz";
  ASSERT_TRUE(WriteFileAtomically(plain, Contents()).ok());
  ASSERT_TRUE(GzipFile(plain, packed).ok());
  absl::StatusOr<std::string> raw = ReadFile(packed);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(WriteFileAtomically(packed, raw->substr(0, raw->size() / 2)).ok());
  absl::StatusOr<std::string> read = ReadPlainOrGzipFile(packed);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StartsWith(read.status().message(), packed + ": gzip data unreadable after "))
      << read.status();
  EXPECT_TRUE(absl::EndsWith(read.status().message(), "unexpected end of file")) << read.status();
}

// The bytes of `text` gzip-compressed.
std::string Gzipped(const std::string& text) {
  const std::string plain = TempDir() + "/member.txt";
  EXPECT_TRUE(WriteFileAtomically(plain, text).ok());
  EXPECT_TRUE(GzipFile(plain, plain + ".gz").ok());
  absl::StatusOr<std::string> packed = ReadFile(plain + ".gz");
  EXPECT_TRUE(packed.ok());
  return packed.ok() ? *packed : std::string();
}

TEST(GzipFileTest, ReadsEveryMemberAndRefusesJunkAfterOne) {
  const std::string path = TempDir() + "/members.gz";
  const std::string first = Gzipped("one,");
  ASSERT_TRUE(WriteFileAtomically(path, first + std::string(5, '\0') + Gzipped("two")).ok());
  absl::StatusOr<std::string> read = ReadPlainOrGzipFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "one,two");
  const std::string junk = first + "junk" + Gzipped("two");
  ASSERT_TRUE(WriteFileAtomically(path, junk).ok());
  read = ReadPlainOrGzipFile(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(read.status().message(),
            absl::StrCat(path, ": gzip data unreadable after ", first.size(), " of ", junk.size(),
                         " compressed bytes: found \"ju\" after the end of a gzip member, where "
                         "only another member or NUL padding may follow"));
}

TEST(GzipFileTest, MissingFileNamesThePath) {
  absl::StatusOr<std::string> read = ReadPlainOrGzipFile("/nonexistent/titan/trace.json.gz");
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("/nonexistent/titan/trace.json.gz"), std::string::npos);
  EXPECT_FALSE(GzipFile("/nonexistent/titan/a", TempDir() + "/a.gz").ok());
}

}  // namespace
}  // namespace titan
