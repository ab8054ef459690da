#ifndef TITAN_LIB_UTIL_DIRECTORY_H_
#define TITAN_LIB_UTIL_DIRECTORY_H_

// Directory helpers on POSIX calls. Not std::filesystem: PyPI's libtorch.so exports its own copies
// of std::filesystem symbols, which interpose on libstdc++'s and crash (remove_all jumps to null).

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace titan {

bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);

// mkdir -p.
absl::Status MakeDirectories(const std::string& path);

// The names in a directory, without "." and "..", in no particular order.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);

// rm -rf: symlinks are removed, not followed. A missing path is not an error.
absl::Status RemoveTree(const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_DIRECTORY_H_
