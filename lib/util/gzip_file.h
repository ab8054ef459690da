#ifndef TITAN_LIB_UTIL_GZIP_FILE_H_
#define TITAN_LIB_UTIL_GZIP_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct z_stream_s;  // zlib's inflate state; keeps <zlib.h> out of this header.

namespace titan {

// Compresses `from` into `to` (gzip, written atomically: on disk before `from` is removed).
absl::Status GzipFile(const std::string& from, const std::string& to);

// A whole file, decompressed when it is gzip (told by its header, whatever the name).
absl::StatusOr<std::string> ReadPlainOrGzipFile(const std::string& path);

// Streams a file's bytes, decompressed when it starts with gzip's magic bytes. Gzip data is read
// as Python's gzip reads it: members one after another, NUL padding after any; other bytes after
// a member are an error (zlib's gzread drops them and all that follows without a word).
class PlainOrGzipReader {
 public:
  static absl::StatusOr<std::unique_ptr<PlainOrGzipReader>> Open(const std::string& path);
  ~PlainOrGzipReader();
  PlainOrGzipReader(const PlainOrGzipReader&) = delete;
  PlainOrGzipReader& operator=(const PlainOrGzipReader&) = delete;

  bool is_gzip() const { return gzip_; }
  // Up to `size` bytes into `out`; 0 at the end. Errors name the path and where it stopped (the
  // compressed byte, for gzip data); every later call repeats the error.
  absl::StatusOr<size_t> Read(char* out, size_t size);
  // Moves on to byte `offset` of the (decompressed) data, at or after the current position: a
  // plain file seeks, gzip data is decompressed up to there. Past the end is an error.
  absl::Status SkipTo(int64_t offset);

 private:
  PlainOrGzipReader(std::string path, int fd);

  // Appends compressed bytes from the file to the unread input; false at the end of the file.
  absl::StatusOr<bool> FillInput();
  absl::StatusOr<size_t> ReadPlain(char* out, size_t size);
  absl::StatusOr<size_t> Inflate(char* out, size_t size);
  // After a member's end: skips NUL padding, then starts the next member or ends the data.
  absl::Status StartNextMember();
  // `what` went wrong in the gzip data, after the compressed bytes consumed so far.
  absl::Status GzipError(absl::string_view what) const;

  const std::string path_;
  const int fd_;
  bool gzip_ = false;
  std::unique_ptr<z_stream_s> stream_;  // next_in/avail_in: the unread part of input_
  std::vector<unsigned char> input_;
  int64_t input_end_ = 0;  // file offset after the bytes read into input_
  int64_t position_ = 0;   // (decompressed) bytes returned or skipped
  bool at_end_ = false;
  absl::Status error_;
};

}  // namespace titan

#endif  // TITAN_LIB_UTIL_GZIP_FILE_H_
