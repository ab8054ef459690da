#include "lib/util/gzip_file.h"

#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

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
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return ErrnoError("open", path);
  gzbuffer(file, kChunkBytes);
  std::string contents;
  std::vector<char> buffer(kChunkBytes);
  while (true) {
    const int n = gzread(file, buffer.data(), static_cast<unsigned>(buffer.size()));
    if (n < 0) {
      const std::string error = GzError(file);
      gzclose(file);
      return absl::DataLossError(absl::StrCat(path, ": read failed: ", error));
    }
    if (n == 0) break;
    contents.append(buffer.data(), n);
  }
  // zlib returns what it has at the end of the file; Z_BUF_ERROR says a stream was cut inside.
  int code = Z_OK;
  gzerror(file, &code);
  gzclose(file);
  if (code == Z_BUF_ERROR) {
    return absl::DataLossError(absl::StrCat(
        path, ": gzip data cut short: the file ends inside a compressed stream (truncated?)"));
  }
  return contents;
}

}  // namespace titan
