#ifndef TITAN_LIB_UTIL_FILE_UTIL_H_
#define TITAN_LIB_UTIL_FILE_UTIL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// Reads a whole file; the error names the path and the OS reason (a directory is an error).
absl::StatusOr<std::string> ReadFile(const std::string& path);

// The `<file>` whose AtomicFileWriter temporary (`<file>.tmp.<pid>`: what a writer killed before
// Commit leaves) `name` is; nullopt when it is none.
std::optional<absl::string_view> AtomicWriteTarget(absl::string_view name);

// A file written under `path.tmp.<pid>` and renamed over `path` by Commit, after an fsync, with
// the directory fsynced too: readers see the old file or the whole new one, never a torn one, even
// after a crash or power loss. Dropped without a successful Commit, the temporary file is removed.
class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Create(std::string path);

  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  // The temporary file's descriptor and path, for writers that need them (zlib, zip writers).
  int fd() const { return fd_; }
  const std::string& temp_path() const { return temp_path_; }

  absl::Status Write(absl::string_view bytes);
  absl::Status Commit();

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd);
  void Discard();

  std::string path_;
  std::string temp_path_;
  int fd_;
};

// Writes `contents` to `path` through an AtomicFileWriter.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// Writes all of `bytes` to `fd`, retrying short and interrupted writes; errors name `path`.
absl::Status WriteFully(int fd, absl::string_view bytes, const std::string& path);

// The directory part of `path`: "." without a slash, "/" for a file in the root.
std::string Dirname(absl::string_view path);
// The last part of `path`, after its last slash.
std::string Basename(absl::string_view path);
// `name` inside folder `dir`; an absolute `name` (or an empty `dir`) is itself, as Python's
// os.path.join and std::filesystem's / read it.
std::string JoinPath(absl::string_view dir, absl::string_view name);
// The parts of `path` as the file system reads them ("a//./b/" is a, b; a leading slash dropped);
// nullopt when one is "..", which may leave the folder the path is taken in.
std::optional<std::vector<std::string>> PathParts(absl::string_view path);

// fsyncs a directory so a rename inside it survives a power loss.
absl::Status FsyncDirectory(const std::string& path);

// An errno-based error that names the operation and the path.
absl::Status ErrnoError(absl::string_view what, const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_FILE_UTIL_H_
