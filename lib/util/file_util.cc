#include "lib/util/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace titan {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int err = errno;
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(path, ": ", what, " failed: ", std::strerror(err)));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("open", path);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {  // opens, then reads as empty
    errno = EISDIR;
    return ErrnoError("open", path);
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return ErrnoError("read", path);
  return buffer.str();
}

absl::Status FsyncDirectory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoError("open directory", path);
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return ErrnoError("fsync", path);
  return absl::OkStatus();
}

absl::Status WriteFully(int fd, absl::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;  // no progress: an error rather than a loop forever
      return ErrnoError("write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

std::string Dirname(absl::string_view path) {
  const size_t slash = path.find_last_of('/');
  if (slash == absl::string_view::npos) return ".";
  return std::string(path.substr(0, slash == 0 ? 1 : slash));
}

std::string Basename(absl::string_view path) {
  return std::string(path.substr(path.find_last_of('/') + 1));
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty() || absl::StartsWith(name, "/")) return std::string(name);
  return absl::EndsWith(dir, "/") ? absl::StrCat(dir, name) : absl::StrCat(dir, "/", name);
}

std::optional<std::vector<std::string>> PathParts(absl::string_view path) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == "..") return std::nullopt;
    if (part != ".") parts.emplace_back(part);
  }
  return parts;
}

// An AtomicFileWriter's temporary is `<file><kAtomicTemporaryInfix><pid>`.
constexpr absl::string_view kAtomicTemporaryInfix = ".tmp.";

std::optional<absl::string_view> AtomicWriteTarget(absl::string_view name) {
  const size_t infix = name.rfind(kAtomicTemporaryInfix);
  if (infix == absl::string_view::npos || infix == 0) return std::nullopt;
  const absl::string_view pid = name.substr(infix + kAtomicTemporaryInfix.size());
  if (pid.empty() || !std::all_of(pid.begin(), pid.end(), absl::ascii_isdigit)) return std::nullopt;
  return name.substr(0, infix);
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(std::string path) {
  std::string temp_path = absl::StrCat(path, kAtomicTemporaryInfix, ::getpid());
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", temp_path);
  return AtomicFileWriter(std::move(path), std::move(temp_path), fd);
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)), temp_path_(std::move(other.temp_path_)), fd_(other.fd_) {
  other.fd_ = -1;
  other.temp_path_.clear();
}

AtomicFileWriter::~AtomicFileWriter() { Discard(); }

void AtomicFileWriter::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

absl::Status AtomicFileWriter::Write(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  return WriteFully(fd_, bytes, temp_path_);
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": already committed"));
  absl::Status status;
  if (::fsync(fd_) != 0) status = ErrnoError("fsync", temp_path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && status.ok()) status = ErrnoError("close", temp_path_);
  if (status.ok() && ::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    status = ErrnoError("rename to " + path_, temp_path_);
  }
  if (!status.ok()) {
    Discard();
    return status;
  }
  temp_path_.clear();  // renamed: nothing left to remove
  return FsyncDirectory(Dirname(path_));
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  absl::StatusOr<AtomicFileWriter> writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  if (absl::Status status = writer->Write(contents); !status.ok()) return status;
  return writer->Commit();
}

}  // namespace titan
