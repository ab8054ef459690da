#include "lib/data/json_document_reader.h"

#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/data/test_util.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// All documents from `position` to the end of the file; fails the test on an error.
std::vector<std::string> ReadAll(const std::string& path, DocumentPosition position = {},
                                 const std::string& field = "text") {
  absl::StatusOr<std::unique_ptr<JsonDocumentReader>> reader =
      JsonDocumentReader::Open(path, field, position);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return {};
  std::vector<std::string> texts;
  while (true) {
    absl::StatusOr<std::optional<std::string>> text = (*reader)->Next();
    EXPECT_TRUE(text.ok()) << text.status();
    if (!text.ok() || !text->has_value()) return texts;
    texts.push_back(**text);
  }
}

// The error of the first failing Next() in `path`.
absl::Status FirstError(const std::string& path, const std::string& field = "text") {
  absl::StatusOr<std::unique_ptr<JsonDocumentReader>> reader =
      JsonDocumentReader::Open(path, field);
  if (!reader.ok()) return reader.status();
  while (true) {
    absl::StatusOr<std::optional<std::string>> text = (*reader)->Next();
    if (!text.ok()) return text.status();
    if (!text->has_value()) return absl::OkStatus();
  }
}

TEST(JsonDocumentReaderTest, RecognizesDataFileNames) {
  EXPECT_TRUE(IsJsonDataFile("a/b.jsonl"));
  EXPECT_TRUE(IsJsonDataFile("b.json"));
  EXPECT_TRUE(IsJsonDataFile("b.jsonl.gz"));
  EXPECT_TRUE(IsJsonDataFile("b.json.gz"));
  EXPECT_FALSE(IsJsonDataFile("b.txt"));
  EXPECT_FALSE(IsJsonDataFile("b.gz"));
  EXPECT_FALSE(IsJsonDataFile("b.jsonl.bak"));
}

TEST(JsonDocumentReaderTest, JsonLinesSkipBlankLinesAndKeepEscapes) {
  const std::string path = FreshTestDir("lines") + "/a.jsonl";
  WriteTestFile(path,
                "{\"text\": \"one\"}\n\n   \n{\"text\": \"t\\u00e9\\n\\\"wo\\\"\", \"id\": 7}\r\n"
                "{\"id\": 1, \"text\": \"last, no newline\"}");
  EXPECT_THAT(ReadAll(path), ElementsAre("one", "t\xc3\xa9\n\"wo\"", "last, no newline"));
}

TEST(JsonDocumentReaderTest, JsonFileHoldsAnArrayOrLines) {
  const std::string dir = FreshTestDir("array");
  WriteTestFile(dir + "/array.json",
                "\n  [ {\"text\": \"a\"},\n {\"text\": \"b}{[\\\"x\", \"meta\": {\"k\": [1, {}]}}"
                "  ,{\"text\": \"c\"}\n]\n");
  EXPECT_THAT(ReadAll(dir + "/array.json"), ElementsAre("a", "b}{[\"x", "c"));
  WriteTestFile(dir + "/empty.json", " [ ] ");
  EXPECT_THAT(ReadAll(dir + "/empty.json"), ElementsAre());
  WriteTestFile(dir + "/lines.json", JsonLines({"x", "y"}));
  EXPECT_THAT(ReadAll(dir + "/lines.json"), ElementsAre("x", "y"));
  WriteTestFile(dir + "/nothing.json", "");
  EXPECT_THAT(ReadAll(dir + "/nothing.json"), ElementsAre());
}

TEST(JsonDocumentReaderTest, AByteOrderMarkIsNotData) {
  const std::string dir = FreshTestDir("bom");
  const std::string bom = "\xef\xbb\xbf";
  WriteTestFile(dir + "/array.json", bom + "[{\"text\": \"a b c\"}, {\"text\": \"d e\"}]");
  EXPECT_THAT(ReadAll(dir + "/array.json"), ElementsAre("a b c", "d e"));
  WriteTestFile(dir + "/array.json.gz", bom + "\n[{\"text\": \"f\"}]", /*gzip=*/true);
  EXPECT_THAT(ReadAll(dir + "/array.json.gz"), ElementsAre("f"));
  WriteTestFile(dir + "/lines.jsonl", bom + JsonLines({"g", "h"}));
  EXPECT_THAT(ReadAll(dir + "/lines.jsonl"), ElementsAre("g", "h"));
  // Resuming after the first element reads on after the mark too.
  absl::StatusOr<std::unique_ptr<JsonDocumentReader>> reader =
      JsonDocumentReader::Open(dir + "/array.json", "text");
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE((*reader)->Next().ok());
  EXPECT_THAT(ReadAll(dir + "/array.json", (*reader)->position()), ElementsAre("d e"));
}

TEST(JsonDocumentReaderTest, ReadsGzip) {
  const std::string dir = FreshTestDir("gzip");
  WriteTestFile(dir + "/a.jsonl.gz", JsonLines({"p", "q"}), /*gzip=*/true);
  EXPECT_THAT(ReadAll(dir + "/a.jsonl.gz"), ElementsAre("p", "q"));
  WriteTestFile(dir + "/a.json.gz", "[{\"text\": \"r\"}, {\"text\": \"s\"}]", /*gzip=*/true);
  EXPECT_THAT(ReadAll(dir + "/a.json.gz"), ElementsAre("r", "s"));
}

TEST(JsonDocumentReaderTest, TruncatedGzipIsAnError) {
  const std::string dir = FreshTestDir("truncated");
  std::vector<std::string> texts(2000, "some text that compresses");
  for (size_t i = 0; i < texts.size(); ++i) texts[i] += std::to_string(i);
  WriteTestFile(dir + "/whole.jsonl.gz", JsonLines(texts), /*gzip=*/true);
  std::ifstream in(dir + "/whole.jsonl.gz", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  WriteTestFile(dir + "/cut.jsonl.gz", bytes.substr(0, bytes.size() / 2));
  const absl::Status status = FirstError(dir + "/cut.jsonl.gz");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr(dir + "/cut.jsonl.gz"));
}

TEST(JsonDocumentReaderTest, AGzipNameMustHoldGzipData) {
  // Python's gzip and Hugging Face datasets refuse it (BadGzipFile).
  const std::string dir = FreshTestDir("not_gzip");
  WriteTestFile(dir + "/plain.jsonl.gz", JsonLines({"p"}));
  const absl::Status status = FirstError(dir + "/plain.jsonl.gz");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(dir + "/plain.jsonl.gz: not gzip data"));
  // Without the name, gzip data is still found by its header; an empty file holds no documents.
  WriteTestFile(dir + "/packed.jsonl", JsonLines({"q"}), /*gzip=*/true);
  EXPECT_THAT(ReadAll(dir + "/packed.jsonl"), ElementsAre("q"));
  WriteTestFile(dir + "/empty.jsonl.gz", "");
  EXPECT_THAT(ReadAll(dir + "/empty.jsonl.gz"), ElementsAre());
}

TEST(JsonDocumentReaderTest, ABadGzipChecksumIsFoundAtTheEndOfTheStream) {
  // zlib drops the output of the failed read: "near byte 0" named no place in the file.
  const std::string dir = FreshTestDir("crc");
  WriteTestFile(dir + "/good.jsonl.gz", JsonLines({"a b c", "d e"}), /*gzip=*/true);
  std::ifstream in(dir + "/good.jsonl.gz", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes[bytes.size() - 8] ^= 0x5a;  // the trailer: CRC-32, then the length
  WriteTestFile(dir + "/bad.jsonl.gz", bytes);
  const absl::Status status = FirstError(dir + "/bad.jsonl.gz");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat(dir, "/bad.jsonl.gz: gzip data unreadable after ",
                                     bytes.size() - 4, " of ", bytes.size(),
                                     " compressed bytes: incorrect data check")));  // at the CRC
}

// The bytes of `contents` gzip-compressed, as one member.
std::string GzipMember(const std::string& dir, const std::string& contents) {
  const std::string path = dir + "/member.gz";
  WriteTestFile(path, contents, /*gzip=*/true);
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(JsonDocumentReaderTest, GzipMembersAreReadWholeAndJunkAfterOneIsAnError) {
  // As Python's gzip reads them: zlib's gzread ended the data at the junk, and the documents after
  // it were never read.
  const std::string dir = FreshTestDir("members");
  const std::string first = GzipMember(dir, JsonLines({"first member"}));
  const std::string second = GzipMember(dir, JsonLines({"second member", "more"}));
  const std::string padding(7, '\0');
  WriteTestFile(dir + "/whole.jsonl.gz", first + second);
  EXPECT_THAT(ReadAll(dir + "/whole.jsonl.gz"),
              ElementsAre("first member", "second member", "more"));
  WriteTestFile(dir + "/padded.jsonl.gz", first + padding + second + padding);
  EXPECT_THAT(ReadAll(dir + "/padded.jsonl.gz"),
              ElementsAre("first member", "second member", "more"));

  const std::string junk = first + "XX" + second;
  WriteTestFile(dir + "/junk.jsonl.gz", junk);
  const absl::Status status = FirstError(dir + "/junk.jsonl.gz");
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(
      status.message(),
      HasSubstr(absl::StrCat(dir, "/junk.jsonl.gz: gzip data unreadable after ", first.size(),
                             " of ", junk.size(), " compressed bytes: found \"XX")));
  // After padding, and as the last bytes, too.
  WriteTestFile(dir + "/late.jsonl.gz", first + padding + second + padding + "X");
  EXPECT_THAT(FirstError(dir + "/late.jsonl.gz").message(),
              HasSubstr(absl::StrCat("gzip data unreadable after ",
                                     first.size() + second.size() + 2 * padding.size(), " of ")));
}

TEST(JsonDocumentReaderTest, ResumesInALaterGzipMember) {
  const std::string dir = FreshTestDir("member_resume");
  const std::string path = dir + "/a.jsonl.gz";
  WriteTestFile(path, GzipMember(dir, JsonLines({"a", "b"})) + std::string(3, '\0') +
                          GzipMember(dir, JsonLines({"c", "d"})));
  absl::StatusOr<std::unique_ptr<JsonDocumentReader>> reader =
      JsonDocumentReader::Open(path, "text");
  ASSERT_TRUE(reader.ok()) << reader.status();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*reader)->Next().ok());
  EXPECT_THAT(ReadAll(path, (*reader)->position()), ElementsAre("d"));
  const absl::StatusOr<std::unique_ptr<JsonDocumentReader>> past =
      JsonDocumentReader::Open(path, "text", {(*reader)->position().byte_offset + 100, 9});
  EXPECT_EQ(past.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(past.status().message(), HasSubstr(path + ": position "));
}

TEST(JsonDocumentReaderTest, TextFieldOption) {
  const std::string path = FreshTestDir("field") + "/a.jsonl";
  WriteTestFile(path, JsonLines({"body one", "body two"}, "content"));
  EXPECT_THAT(ReadAll(path, {}, "content"), ElementsAre("body one", "body two"));
  EXPECT_THAT(FirstError(path).message(), HasSubstr("missing text field \"text\""));
}

TEST(JsonDocumentReaderTest, DocumentsLongerThanTheReadChunk) {
  const std::string dir = FreshTestDir("long");
  const std::string big(3 << 20, 'z');
  WriteTestFile(dir + "/a.jsonl", JsonLines({"s", big, "t"}));
  EXPECT_THAT(ReadAll(dir + "/a.jsonl"), ElementsAre("s", big, "t"));
  WriteTestFile(dir + "/a.json.gz",
                absl::StrCat("[{\"text\": \"s\"}, {\"text\": \"", big, "\"}, {\"text\": \"t\"}]"),
                /*gzip=*/true);
  EXPECT_THAT(ReadAll(dir + "/a.json.gz"), ElementsAre("s", big, "t"));
}

// Resuming from position() after each document yields exactly the remaining documents.
class ResumeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ResumeTest, ResumesAfterEveryDocument) {
  const std::string name = GetParam();
  const std::string path = FreshTestDir("resume") + "/" + name;
  const std::vector<std::string> texts = {"alpha", "", "gamma\nwith newline", "delta", "epsilon"};
  const bool gzip = absl::EndsWith(name, ".gz");
  if (absl::StrContains(name, "array")) {
    std::string array = "[\n";
    for (size_t i = 0; i < texts.size(); ++i) {
      array += absl::StrCat(i == 0 ? "" : ",\n\n", nlohmann::json{{"text", texts[i]}}.dump());
    }
    WriteTestFile(path, array + "\n]\n", gzip);
  } else {
    WriteTestFile(path, "\n" + JsonLines(texts) + "\n\n", gzip);
  }
  for (size_t skip = 0; skip <= texts.size(); ++skip) {
    absl::StatusOr<std::unique_ptr<JsonDocumentReader>> reader =
        JsonDocumentReader::Open(path, "text");
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (size_t i = 0; i < skip; ++i) ASSERT_TRUE((*reader)->Next().ok());
    const std::vector<std::string> rest = ReadAll(path, (*reader)->position());
    EXPECT_EQ(rest, std::vector<std::string>(texts.begin() + skip, texts.end())) << skip;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ResumeTest,
                         ::testing::Values("a.jsonl", "a.jsonl.gz", "array.json", "array.json.gz"));

// Restoring seeks: lines before the position are not parsed again (plain files are not even read).
TEST(JsonDocumentReaderTest, ResumeDoesNotReparseEarlierLines) {
  const std::string path = FreshTestDir("seek") + "/a.jsonl";
  WriteTestFile(path, JsonLines({"first", "second", "third"}));
  absl::StatusOr<std::unique_ptr<JsonDocumentReader>> reader =
      JsonDocumentReader::Open(path, "text");
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_TRUE((*reader)->Next().ok());
  ASSERT_TRUE((*reader)->Next().ok());
  const DocumentPosition position = (*reader)->position();
  EXPECT_EQ(position.line, 2);
  // Same length, so the offset of "third" is unchanged, but no longer JSON.
  const std::string broken = JsonLines({"first", "second"});
  WriteTestFile(path, std::string(broken.size() - 1, '#') + "\n" + JsonLines({"third"}));
  EXPECT_THAT(FirstError(path).message(), HasSubstr(path + ":1: invalid JSON"));
  EXPECT_THAT(ReadAll(path, position), ElementsAre("third"));
}

struct ErrorCase {
  const char* name;
  const char* contents;
  const char* expected;  // substring of the message after the file name
};

class MalformedTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(MalformedTest, ErrorNamesFileLineAndProblem) {
  const ErrorCase& error_case = GetParam();
  const std::string path = FreshTestDir("malformed") + "/" + error_case.name;
  WriteTestFile(path, error_case.contents);
  const absl::Status status = FirstError(path);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr(path + ":" + error_case.expected));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MalformedTest,
    ::testing::Values(
        ErrorCase{"bad.jsonl", "{\"text\": \"ok\"}\n\n{\"text\": \"cut", "3: invalid JSON: "},
        ErrorCase{"pretty.json", "{\n \"text\": \"pretty object\"\n}\n",
                  "1: invalid JSON: expected a JSON array of objects, or one JSON object per "
                  "line ("},
        ErrorCase{"pretty_lines.jsonl", "{\n \"text\": \"pretty object\"\n}\n",
                  "1: invalid JSON: expected one JSON object per line ("},
        ErrorCase{"missing.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"x\"}\n",
                  "2: missing text field \"text\""},
        ErrorCase{"number.jsonl", "{\"text\": 12}\n",
                  "1: text field \"text\" is number, expected a string"},
        ErrorCase{"list.jsonl", "[\"text\"]\n", "1: expected a JSON object, found array"},
        ErrorCase{"element.json", "[{\"text\": \"a\"},\n \"b\"]",
                  "2: expected a JSON object as array element, found '\"'"},
        ErrorCase{"comma.json", "[{\"text\": \"a\"}\n\n{\"text\": \"b\"}]",
                  "3: expected ',' or ']' after an array element, found '{'"},
        ErrorCase{"unterminated.json", "[{\"text\": \"a\"},\n{\"text\": \"b\"",
                  "2: unterminated JSON object at end of file"},
        ErrorCase{"open.json", "[{\"text\": \"a\"}\n",
                  "2: expected ',' or ']' after an array element, found end of file"},
        ErrorCase{"trailing.json", "[{\"text\": \"a\"}]\n{}",
                  "2: expected end of file after the array, found '{'"},
        ErrorCase{"field.json", "[{\"text\": \"a\"},\n{\"text\": null}]",
                  "2: text field \"text\" is null, expected a string"}),
    [](const ::testing::TestParamInfo<ErrorCase>& info) {
      std::string name = info.param.name;
      return name.substr(0, name.find('.'));
    });

}  // namespace
}  // namespace titan
