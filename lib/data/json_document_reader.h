#ifndef TITAN_LIB_DATA_JSON_DOCUMENT_READER_H_
#define TITAN_LIB_DATA_JSON_DOCUMENT_READER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/util/gzip_file.h"

namespace titan {

// Where a reader stands in its file: between two documents.
struct DocumentPosition {
  int64_t byte_offset = 0;  // uncompressed bytes before the next document; 0 = start of the file
  int64_t line = 0;  // newlines before byte_offset (1-based line numbers in errors follow it)
};

// True for the names the dataset reads: .jsonl, .json, .jsonl.gz, .json.gz.
bool IsJsonDataFile(absl::string_view path);

// Streams the text field of each JSON object in one file, a bounded buffer at a time.
// .jsonl: one object per line (blank lines skipped). .json: JSON lines, or one array of objects
// when the first non-space character is '['. gzip is detected by its header, whatever the name,
// but a name ending in .gz must hold gzip data.
class JsonDocumentReader {
 public:
  // Opens `path` at `position`, which is either {} or a position() of a reader on the same file.
  // Plain files seek there directly; gzip files decompress (without parsing) up to it.
  static absl::StatusOr<std::unique_ptr<JsonDocumentReader>> Open(const std::string& path,
                                                                  std::string text_field,
                                                                  DocumentPosition position = {});
  ~JsonDocumentReader();
  JsonDocumentReader(const JsonDocumentReader&) = delete;
  JsonDocumentReader& operator=(const JsonDocumentReader&) = delete;

  // The next document's text, std::nullopt at the end of the file. Errors name path:line.
  absl::StatusOr<std::optional<std::string>> Next();

  // Just after the last document returned: Open(path, field, position()) resumes from here.
  DocumentPosition position() const { return {offset_, line_}; }

 private:
  enum class Format { kJsonLines, kJsonArray };
  enum class ArrayState { kBeforeOpen, kBeforeFirst, kAfterElement, kDone };

  JsonDocumentReader(std::string path, std::string text_field,
                     std::unique_ptr<PlainOrGzipReader> file);

  // Appends the next chunk of the file to buffer_; false at the end of the file.
  absl::StatusOr<bool> Fill();
  // Moves to `position`, which is at or after the current one, before any document is read.
  absl::Status SkipTo(DocumentPosition position);
  // Byte at buffer_pos_ + ahead without consuming it; -1 at the end of the file.
  absl::StatusOr<int> Peek(size_t ahead = 0);
  void Consume(size_t n);
  // Editors on Windows start files with one: it is not data, and it hid an array's '['.
  absl::Status SkipByteOrderMark();
  absl::Status SkipWhitespace();
  absl::StatusOr<std::optional<std::string>> NextLine();
  absl::StatusOr<std::optional<std::string>> NextArrayElement();
  // The whole `{...}` object starting at buffer_pos_, consumed.
  absl::StatusOr<std::string> ReadObjectText();
  // Text of `field` in the JSON object `json_text` that starts on `line`.
  absl::StatusOr<std::string> ExtractText(absl::string_view json_text, int64_t line) const;
  absl::Status Error(int64_t line, absl::string_view what) const;

  std::string path_;
  std::string text_field_;
  std::unique_ptr<PlainOrGzipReader> file_;
  Format format_ = Format::kJsonLines;
  ArrayState array_state_ = ArrayState::kBeforeOpen;
  std::string buffer_;  // bytes read from the file; unconsumed from buffer_pos_
  size_t buffer_pos_ = 0;
  bool at_eof_ = false;
  int64_t offset_ = 0;  // uncompressed offset of buffer_[buffer_pos_]
  int64_t line_ = 0;    // newlines consumed before offset_
};

}  // namespace titan

#endif  // TITAN_LIB_DATA_JSON_DOCUMENT_READER_H_
