#ifndef TITAN_LIB_UTIL_FILE_UTIL_H_
#define TITAN_LIB_UTIL_FILE_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// Reads a whole file; the error names the path and the OS reason.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Writes `contents` to `path` through `path.tmp.<pid>`, fsync and rename: readers see the old file
// or the new one, never a torn one.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// fsyncs a directory so a rename inside it survives a power loss.
absl::Status FsyncDirectory(const std::string& path);

// An errno-based error that names the operation and the path.
absl::Status ErrnoError(absl::string_view what, const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_FILE_UTIL_H_
