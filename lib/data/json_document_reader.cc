#include "lib/data/json_document_reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
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
  absl::StatusOr<std::unique_ptr<PlainOrGzipReader>> file = PlainOrGzipReader::Open(path);
  if (!file.ok()) return file.status();
  const bool gzip = (*file)->is_gzip();
  std::unique_ptr<JsonDocumentReader> reader(
      new JsonDocumentReader(path, std::move(text_field), *std::move(file)));

  absl::string_view name = path;
  // Python's gzip and Hugging Face refuse plain bytes so named (BadGzipFile).
  if (absl::ConsumeSuffix(&name, ".gz") && !gzip) {
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
    status = reader->SkipTo(position);
    if (!status.ok()) return status;
  }
  return reader;
}

JsonDocumentReader::JsonDocumentReader(std::string path, std::string text_field,
                                       std::unique_ptr<PlainOrGzipReader> file)
    : path_(std::move(path)), text_field_(std::move(text_field)), file_(std::move(file)) {}

JsonDocumentReader::~JsonDocumentReader() = default;

absl::Status JsonDocumentReader::SkipTo(DocumentPosition position) {
  const int64_t buffer_start = offset_ - static_cast<int64_t>(buffer_pos_);
  if (position.byte_offset <= buffer_start + static_cast<int64_t>(buffer_.size())) {
    // Already read while looking at the start of the file.
    buffer_pos_ = static_cast<size_t>(position.byte_offset - buffer_start);
  } else {
    absl::Status status = file_->SkipTo(position.byte_offset);
    if (!status.ok()) return status;
    buffer_.clear();
    buffer_pos_ = 0;
    at_eof_ = false;
  }
  offset_ = position.byte_offset;
  line_ = position.line;
  // A saved position lies after a document, so in an array it follows an element.
  array_state_ = ArrayState::kAfterElement;
  return absl::OkStatus();
}

absl::Status JsonDocumentReader::Error(int64_t line, absl::string_view what) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ":", line, ": ", what));
}

absl::StatusOr<bool> JsonDocumentReader::Fill() {
  if (at_eof_) return false;
  buffer_.erase(0, buffer_pos_);
  buffer_pos_ = 0;
  const size_t old_size = buffer_.size();
  buffer_.resize(old_size + kReadChunkBytes);
  absl::StatusOr<size_t> n = file_->Read(buffer_.data() + old_size, kReadChunkBytes);
  buffer_.resize(old_size + (n.ok() ? *n : 0));
  if (!n.ok()) return n.status();
  if (*n == 0) {
    at_eof_ = true;
    return false;
  }
  return true;
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
