#include "lib/data/json_document_reader.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "lib/util/file_util.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

constexpr unsigned kReadChunkBytes = 1 << 20;

// The found byte for an error message: 'x' when printable, else its hex code.
std::string DescribeByte(int c) {
  if (c < 0) return "end of file";
  if (absl::ascii_isprint(static_cast<unsigned char>(c))) return absl::StrFormat("'%c'", c);
  return absl::StrFormat("byte 0x%02x", c);
}

// zlib's message for the last error on `file`, without the "<path>: " it starts with.
std::string GzError(gzFile file, absl::string_view path) {
  int errnum = Z_OK;
  absl::string_view message = gzerror(file, &errnum);
  if (errnum == Z_ERRNO) return std::strerror(errno);
  absl::ConsumePrefix(&message, absl::StrCat(path, ": "));
  return std::string(message);
}

}  // namespace

bool IsJsonDataFile(absl::string_view path) {
  absl::ConsumeSuffix(&path, ".gz");
  return absl::EndsWith(path, ".jsonl") || absl::EndsWith(path, ".json");
}

absl::StatusOr<std::unique_ptr<JsonDocumentReader>> JsonDocumentReader::Open(
    const std::string& path, std::string text_field, DocumentPosition position) {
  if (position.byte_offset < 0 || position.line < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": invalid position: byte ",
                                                   position.byte_offset, ", line ", position.line));
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return ErrnoError("open", path);
  gzbuffer(file, kReadChunkBytes);
  // Reads the header now: a plain file is then in zlib's copy mode, where gzseek is an lseek.
  gzdirect(file);
  std::unique_ptr<JsonDocumentReader> reader(
      new JsonDocumentReader(path, std::move(text_field), file));

  absl::string_view name = path;
  // zlib reads plain bytes as they are; Python's gzip and Hugging Face refuse them (BadGzipFile).
  if (absl::ConsumeSuffix(&name, ".gz") && gzdirect(file)) {
    absl::StatusOr<int> c = reader->Peek();
    if (!c.ok()) return c.status();
    if (*c >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": not gzip data, though the name ends in .gz; compress it, or rename it"));
    }
  }
  absl::Status status = reader->SkipByteOrderMark();
  if (!status.ok()) return status;
  if (absl::EndsWith(name, ".json")) {
    for (size_t ahead = 0;; ++ahead) {
      absl::StatusOr<int> c = reader->Peek(ahead);
      if (!c.ok()) return c.status();
      if (*c >= 0 && absl::ascii_isspace(static_cast<unsigned char>(*c))) continue;
      if (*c == '[') reader->format_ = Format::kJsonArray;
      break;
    }
  }
  if (position.byte_offset > 0) {
    reader->buffer_.clear();
    reader->buffer_pos_ = 0;
    reader->at_eof_ = false;
    if (gzseek(file, position.byte_offset, SEEK_SET) != position.byte_offset) {
      return absl::DataLossError(absl::StrCat(path, ": seek to byte ", position.byte_offset,
                                              " failed: ", GzError(file, path)));
    }
    // A plain file seeks past its end without complaint; reading there would end the file early.
    struct stat st;
    if (gzdirect(file) && ::stat(path.c_str(), &st) == 0 && st.st_size < position.byte_offset) {
      return absl::DataLossError(absl::StrCat(path, ": position ", position.byte_offset,
                                              " is past the end of the file (", st.st_size,
                                              " bytes)"));
    }
    reader->offset_ = position.byte_offset;
    reader->line_ = position.line;
    // A saved position lies after a document, so in an array it follows an element.
    reader->array_state_ = ArrayState::kAfterElement;
  }
  return reader;
}

JsonDocumentReader::JsonDocumentReader(std::string path, std::string text_field, gzFile_s* file)
    : path_(std::move(path)), text_field_(std::move(text_field)), file_(file) {}

JsonDocumentReader::~JsonDocumentReader() { gzclose(file_); }

absl::Status JsonDocumentReader::Error(int64_t line, absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ":", line, ": ", what));
}

absl::StatusOr<bool> JsonDocumentReader::Fill() {
  if (at_eof_) return false;
  buffer_.erase(0, buffer_pos_);
  buffer_pos_ = 0;
  const size_t old_size = buffer_.size();
  buffer_.resize(old_size + kReadChunkBytes);
  const int n = gzread(file_, buffer_.data() + old_size, kReadChunkBytes);
  buffer_.resize(old_size + std::max(n, 0));
  int errnum = Z_OK;
  gzerror(file_, &errnum);
  // Z_BUF_ERROR at the end means a truncated gzip stream; zlib returns the data it had first.
  if (n < 0 || (n == 0 && errnum != Z_OK)) return ReadError();
  if (n == 0) {
    at_eof_ = true;
    return false;
  }
  return true;
}

absl::Status JsonDocumentReader::ReadError() const {
  if (gzdirect(file_)) {
    return absl::DataLossError(absl::StrCat(path_, ": read failed at byte ",
                                            offset_ + (buffer_.size() - buffer_pos_), ": ",
                                            GzError(file_, path_)));
  }
  // zlib drops the output of the read that failed, so only the compressed position is known.
  struct stat st;
  const std::string size =
      ::stat(path_.c_str(), &st) == 0 ? absl::StrCat(" of ", st.st_size) : std::string();
  return absl::DataLossError(absl::StrCat(path_, ": gzip data unreadable after ", gzoffset(file_),
                                          size, " compressed bytes: ", GzError(file_, path_)));
}

absl::StatusOr<int> JsonDocumentReader::Peek(size_t ahead) {
  while (buffer_pos_ + ahead >= buffer_.size()) {
    absl::StatusOr<bool> more = Fill();
    if (!more.ok()) return more.status();
    if (!*more) return -1;
  }
  return static_cast<unsigned char>(buffer_[buffer_pos_ + ahead]);
}

void JsonDocumentReader::Consume(size_t n) {
  line_ += std::count(buffer_.begin() + buffer_pos_, buffer_.begin() + buffer_pos_ + n, '\n');
  offset_ += n;
  buffer_pos_ += n;
}

absl::Status JsonDocumentReader::SkipByteOrderMark() {
  for (size_t i = 0; i < 3; ++i) {
    absl::StatusOr<int> c = Peek(i);
    if (!c.ok()) return c.status();
    if (*c != static_cast<unsigned char>("\xef\xbb\xbf"[i])) return absl::OkStatus();
  }
  Consume(3);
  return absl::OkStatus();
}

absl::Status JsonDocumentReader::SkipWhitespace() {
  while (true) {
    absl::StatusOr<int> c = Peek();
    if (!c.ok()) return c.status();
    if (*c < 0 || !absl::ascii_isspace(static_cast<unsigned char>(*c))) return absl::OkStatus();
    Consume(1);
  }
}

absl::StatusOr<std::optional<std::string>> JsonDocumentReader::Next() {
  return format_ == Format::kJsonLines ? NextLine() : NextArrayElement();
}

absl::StatusOr<std::optional<std::string>> JsonDocumentReader::NextLine() {
  while (true) {
    size_t newline = std::string::npos;
    size_t scanned = 0;  // bytes after buffer_pos_ already known to hold no newline
    while ((newline = buffer_.find('\n', buffer_pos_ + scanned)) == std::string::npos) {
      scanned = buffer_.size() - buffer_pos_;
      absl::StatusOr<bool> more = Fill();
      if (!more.ok()) return more.status();
      if (!*more) break;
    }
    if (newline == std::string::npos && buffer_pos_ == buffer_.size()) return std::nullopt;
    const size_t end = newline == std::string::npos ? buffer_.size() : newline;
    const absl::string_view line(buffer_.data() + buffer_pos_, end - buffer_pos_);
    const int64_t line_number = line_ + 1;
    // Consume leaves buffer_ intact until the next Fill, so `line` stays valid.
    Consume(line.size() + (newline == std::string::npos ? 0 : 1));
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<std::string> text = ExtractText(line, line_number);
    if (!text.ok()) return text.status();
    return std::optional<std::string>(std::move(*text));
  }
}

absl::StatusOr<std::optional<std::string>> JsonDocumentReader::NextArrayElement() {
  if (array_state_ == ArrayState::kDone) return std::nullopt;
  absl::Status status = SkipWhitespace();
  if (!status.ok()) return status;
  absl::StatusOr<int> c = Peek();
  if (!c.ok()) return c.status();
  if (array_state_ == ArrayState::kBeforeOpen) {
    if (*c != '[') return Error(line_ + 1, absl::StrCat("expected '[', found ", DescribeByte(*c)));
    Consume(1);
    array_state_ = ArrayState::kBeforeFirst;
    if (!(status = SkipWhitespace()).ok()) return status;
    if (!(c = Peek()).ok()) return c.status();
  }
  if (*c == ']') {
    Consume(1);
    array_state_ = ArrayState::kDone;
    if (!(status = SkipWhitespace()).ok()) return status;
    if (!(c = Peek()).ok()) return c.status();
    if (*c >= 0) {
      return Error(line_ + 1,
                   absl::StrCat("expected end of file after the array, found ", DescribeByte(*c)));
    }
    return std::nullopt;
  }
  if (array_state_ == ArrayState::kAfterElement) {
    if (*c != ',') {
      return Error(line_ + 1, absl::StrCat("expected ',' or ']' after an array element, found ",
                                           DescribeByte(*c)));
    }
    Consume(1);
    if (!(status = SkipWhitespace()).ok()) return status;
    if (!(c = Peek()).ok()) return c.status();
  }
  if (*c != '{') {
    return Error(line_ + 1,
                 absl::StrCat("expected a JSON object as array element, found ", DescribeByte(*c)));
  }
  const int64_t line_number = line_ + 1;
  absl::StatusOr<std::string> object_text = ReadObjectText();
  if (!object_text.ok()) return object_text.status();
  array_state_ = ArrayState::kAfterElement;
  absl::StatusOr<std::string> text = ExtractText(*object_text, line_number);
  if (!text.ok()) return text.status();
  return std::optional<std::string>(std::move(*text));
}

// Hand-written bracket matcher: nlohmann's SAX parser cannot stop after one element and resume
// at a byte offset later, which streaming and exact restore need.
absl::StatusOr<std::string> JsonDocumentReader::ReadObjectText() {
  size_t length = 0;
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  while (true) {
    absl::StatusOr<int> c = Peek(length);
    if (!c.ok()) return c.status();
    if (*c < 0) return Error(line_ + 1, "unterminated JSON object at end of file");
    ++length;
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (*c == '\\') {
        escaped = true;
      } else if (*c == '"') {
        in_string = false;
      }
    } else if (*c == '"') {
      in_string = true;
    } else if (*c == '{' || *c == '[') {
      ++depth;
    } else if ((*c == '}' || *c == ']') && --depth == 0) {
      break;
    }
  }
  std::string text = buffer_.substr(buffer_pos_, length);
  Consume(length);
  return text;
}

absl::StatusOr<std::string> JsonDocumentReader::ExtractText(absl::string_view json_text,
                                                            int64_t line) const {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::parse_error& e) {
    if (format_ == Format::kJsonArray) return Error(line, absl::StrCat("invalid JSON: ", e.what()));
    // An object spread over lines (pretty-printed) fails here as a truncated line.
    absl::string_view name = path_;
    absl::ConsumeSuffix(&name, ".gz");
    return Error(line, absl::StrCat("invalid JSON: expected ",
                                    absl::EndsWith(name, ".json")
                                        ? "a JSON array of objects, or one JSON object per line"
                                        : "one JSON object per line",
                                    " (", e.what(), ")"));
  }
  if (!document.is_object()) {
    return Error(line, absl::StrCat("expected a JSON object, found ", document.type_name()));
  }
  auto field = document.find(text_field_);
  if (field == document.end()) {
    return Error(line, absl::StrCat("missing text field \"", text_field_, "\""));
  }
  if (!field->is_string()) {
    return Error(line, absl::StrCat("text field \"", text_field_, "\" is ", field->type_name(),
                                    ", expected a string"));
  }
  return std::move(field->get_ref<std::string&>());
}

}  // namespace titan
