#include "lib/util/gzip_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

constexpr size_t kChunkBytes = 1 << 20;

std::string GzError(gzFile file) {
  int code = 0;
  const char* message = gzerror(file, &code);
  return code == Z_ERRNO ? std::strerror(errno) : message;
}

}  // namespace

absl::Status GzipFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) return ErrnoError("open", from);
  absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(to);
  if (!file.ok()) return file.status();
  const std::string& tmp = file->temp_path();
  // zlib closes the descriptor it writes through; the writer keeps its own to fsync and rename.
  const int gz_fd = ::dup(file->fd());
  if (gz_fd < 0) return ErrnoError("dup", tmp);
  gzFile out = gzdopen(gz_fd, "wb6");
  if (out == nullptr) {
    ::close(gz_fd);
    return ErrnoError("open", tmp);
  }
  std::vector<char> buffer(kChunkBytes);
  absl::Status status;
  while (status.ok() && in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const int n = static_cast<int>(in.gcount());
    if (n > 0 && gzwrite(out, buffer.data(), n) != n) {
      status = absl::DataLossError(absl::StrCat(tmp, ": gzip write failed: ", GzError(out)));
    }
  }
  if (status.ok() && in.bad()) status = ErrnoError("read", from);
  if (gzclose(out) != Z_OK && status.ok()) status = ErrnoError("close", tmp);
  if (status.ok()) status = file->Commit();  // `to` is on disk before `from` goes
  if (!status.ok()) return status;
  if (std::remove(from.c_str()) != 0) return ErrnoError("remove", from);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadPlainOrGzipFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<PlainOrGzipReader>> reader = PlainOrGzipReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::string contents;
  std::vector<char> buffer(kChunkBytes);
  while (true) {
    absl::StatusOr<size_t> n = (*reader)->Read(buffer.data(), buffer.size());
    if (!n.ok()) return n.status();
    if (*n == 0) return contents;
    contents.append(buffer.data(), *n);
  }
}

absl::StatusOr<std::unique_ptr<PlainOrGzipReader>> PlainOrGzipReader::Open(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path);
  std::unique_ptr<PlainOrGzipReader> reader(new PlainOrGzipReader(path, fd));
  z_stream_s& stream = *reader->stream_;
  while (stream.avail_in < 2) {
    absl::StatusOr<bool> more = reader->FillInput();
    if (!more.ok()) return more.status();
    if (!*more) break;
  }
  reader->gzip_ = stream.avail_in >= 2 && stream.next_in[0] == 0x1f && stream.next_in[1] == 0x8b;
  // 16 + MAX_WBITS: gzip only, with its header and trailer checked.
  if (reader->gzip_ && inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) {
    reader->gzip_ = false;  // nothing for the destructor to end
    return absl::ResourceExhaustedError(absl::StrCat(path, ": gzip: out of memory"));
  }
  return reader;
}

PlainOrGzipReader::PlainOrGzipReader(std::string path, int fd)
    : path_(std::move(path)), fd_(fd), stream_(std::make_unique<z_stream_s>()) {
  input_.resize(kChunkBytes);
  stream_->next_in = input_.data();
  stream_->avail_in = 0;
}

PlainOrGzipReader::~PlainOrGzipReader() {
  if (gzip_) inflateEnd(stream_.get());
  ::close(fd_);
}

absl::StatusOr<bool> PlainOrGzipReader::FillInput() {
  z_stream_s& stream = *stream_;
  std::memmove(input_.data(), stream.next_in, stream.avail_in);
  stream.next_in = input_.data();
  ssize_t n;
  do {
    n = ::read(fd_, input_.data() + stream.avail_in, input_.size() - stream.avail_in);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    return absl::DataLossError(
        absl::StrCat(path_, ": read failed at byte ", input_end_, ": ", std::strerror(errno)));
  }
  stream.avail_in += static_cast<unsigned>(n);
  input_end_ += n;
  return n > 0;
}

absl::StatusOr<size_t> PlainOrGzipReader::Read(char* out, size_t size) {
  if (!error_.ok()) return error_;
  if (size == 0 || at_end_) return 0;
  absl::StatusOr<size_t> n = gzip_ ? Inflate(out, size) : ReadPlain(out, size);
  if (!n.ok()) {
    error_ = n.status();
    return error_;
  }
  position_ += *n;
  return n;
}

absl::StatusOr<size_t> PlainOrGzipReader::ReadPlain(char* out, size_t size) {
  z_stream_s& stream = *stream_;
  if (stream.avail_in == 0) {
    absl::StatusOr<bool> more = FillInput();
    if (!more.ok()) return more.status();
    if (!*more) {
      at_end_ = true;
      return 0;
    }
  }
  const size_t n = std::min<size_t>(size, stream.avail_in);
  std::memcpy(out, stream.next_in, n);
  stream.next_in += n;
  stream.avail_in -= n;
  return n;
}

absl::StatusOr<size_t> PlainOrGzipReader::Inflate(char* out, size_t size) {
  z_stream_s& stream = *stream_;
  size_t produced = 0;
  while (produced == 0 && !at_end_) {
    if (stream.avail_in == 0) {
      absl::StatusOr<bool> more = FillInput();
      if (!more.ok()) return more.status();
      if (!*more) return GzipError("unexpected end of file");
    }
    stream.next_out = reinterpret_cast<unsigned char*>(out);
    stream.avail_out = static_cast<unsigned>(std::min<size_t>(size, kChunkBytes));
    const unsigned avail_out = stream.avail_out;
    const int result = inflate(&stream, Z_NO_FLUSH);
    produced = avail_out - stream.avail_out;
    if (result == Z_STREAM_END) {
      absl::Status status = StartNextMember();
      if (!status.ok()) return status;
    } else if (result != Z_OK && result != Z_BUF_ERROR) {
      return GzipError(stream.msg != nullptr ? stream.msg : zError(result));
    }
  }
  return produced;
}

absl::Status PlainOrGzipReader::StartNextMember() {
  z_stream_s& stream = *stream_;
  while (true) {
    while (stream.avail_in > 0 && stream.next_in[0] == 0) {
      ++stream.next_in;
      --stream.avail_in;
    }
    if (stream.avail_in >= 2) break;
    absl::StatusOr<bool> more = FillInput();
    if (!more.ok()) return more.status();
    if (!*more) break;
  }
  if (stream.avail_in == 0) {
    at_end_ = true;
    return absl::OkStatus();
  }
  if (stream.avail_in >= 2 && stream.next_in[0] == 0x1f && stream.next_in[1] == 0x8b) {
    inflateReset(&stream);
    return absl::OkStatus();
  }
  const absl::string_view found(reinterpret_cast<const char*>(stream.next_in),
                                std::min<size_t>(stream.avail_in, 2));
  return GzipError(absl::StrCat("found \"", absl::CHexEscape(found),
                                "\" after the end of a gzip member, where only another member "
                                "or NUL padding may follow"));
}

absl::Status PlainOrGzipReader::GzipError(absl::string_view what) const {
  struct stat info;
  const std::string size =
      ::fstat(fd_, &info) == 0 ? absl::StrCat(" of ", info.st_size) : std::string();
  return absl::DataLossError(absl::StrCat(path_, ": gzip data unreadable after ",
                                          input_end_ - stream_->avail_in, size,
                                          " compressed bytes: ", what));
}

absl::Status PlainOrGzipReader::SkipTo(int64_t offset) {
  if (offset < position_) {
    return absl::InternalError(
        absl::StrCat(path_, ": cannot skip back from byte ", position_, " to byte ", offset));
  }
  if (!gzip_) {
    struct stat info;
    if (::fstat(fd_, &info) != 0) return ErrnoError("stat", path_);
    if (info.st_size < offset) {
      return absl::DataLossError(absl::StrCat(
          path_, ": position ", offset, " is past the end of the file (", info.st_size, " bytes)"));
    }
    if (::lseek(fd_, offset, SEEK_SET) != offset) return ErrnoError("seek", path_);
    stream_->avail_in = 0;
    input_end_ = position_ = offset;
    return absl::OkStatus();
  }
  std::vector<char> discarded(std::min<int64_t>(kChunkBytes, offset - position_));
  while (position_ < offset) {
    absl::StatusOr<size_t> n =
        Read(discarded.data(), std::min<int64_t>(discarded.size(), offset - position_));
    if (!n.ok()) return n.status();
    if (*n == 0) {
      return absl::DataLossError(absl::StrCat(path_, ": position ", offset,
                                              " is past the end of the data (", position_,
                                              " bytes decompressed)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace titan
