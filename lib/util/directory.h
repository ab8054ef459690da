#ifndef TITAN_LIB_UTIL_DIRECTORY_H_
#define TITAN_LIB_UTIL_DIRECTORY_H_

// Directory helpers on POSIX calls. Not std::filesystem: PyPI's libtorch.so exports its own copies
// of std::filesystem symbols, which interpose on libstdc++'s and crash (remove_all jumps to null).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
bool IsRegularFile(const std::string& path);  // Links followed.
// The size in bytes of the file at `path`; nullopt when none is there.
std::optional<int64_t> FileSize(const std::string& path);

// rename(2): `from` takes the name `to`, replacing a file there; errors name `from`.
absl::Status RenamePath(const std::string& from, const std::string& to);

// mkdir -p.
absl::Status MakeDirectories(const std::string& path);

// The names in a directory, without "." and "..", in no particular order.
absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path);

// rm -rf: symlinks are removed, not followed. A missing path is not an error.
absl::Status RemoveTree(const std::string& path);

// r where `name` is `<prefix><r><suffix>` with r spelled as the writers spell a rank (rank_1; not
// rank_01 or rank_-1).
std::optional<int> RankInName(absl::string_view name, absl::string_view prefix,
                              absl::string_view suffix);

// The ranks r, ascending, of the entries `<prefix><r><suffix>` in `folder` (none where it is
// missing): the per-rank files an earlier run left there, whatever its world size or layout.
std::vector<int> RanksIn(const std::string& folder, absl::string_view prefix,
                         absl::string_view suffix);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_DIRECTORY_H_
