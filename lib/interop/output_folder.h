#ifndef TITAN_LIB_INTEROP_OUTPUT_FOLDER_H_
#define TITAN_LIB_INTEROP_OUTPUT_FOLDER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/util/folder_lock.h"

// How a conversion claims and publishes its output folder: never writing into another run's
// folder, and leaving it either as it was or whole.
namespace titan {

// An output directory that does not exist or is empty (a rename may replace an empty directory),
// but for what interrupted conversions left (a --to=titan step temporary, an atomic write's
// temporary), which is returned.
absl::StatusOr<std::vector<std::string>> CheckOutputIsFree(const std::string& output);

// `path` with its "." and ".." components resolved, so that the folder it names can be made,
// renamed onto and removed ("out/." cannot be): the part that exists as realpath reads it (links
// resolved, as the kernel reads "link/.."), the rest, which the conversion makes, by its names.
// A path without such components is returned as given, so that errors name what was typed.
absl::StatusOr<std::string> ResolveDotComponents(const std::string& path);

// Removes everything in `folder`, which held nothing when the caller's write into it began.
absl::Status EmptyFolder(const std::string& folder);

// Locks `output` (made if missing) against other conversions, checks that it is free under the
// lock, and removes what an interrupted conversion left in it: no other run writes there now.
absl::StatusOr<std::unique_ptr<FolderLock>> LockFreeOutput(const std::string& output);

// `write` into <output>.tmp-<pid>, then one rename: `output` (empty, locked by the caller) is
// either still empty or whole. Temporaries that a crashed write to `output` left behind are
// removed first. An `output` that links to an empty directory is written there, with the
// temporary beside that directory, which the result replaces with its group and mode. The
// working directory is written in place, and emptied on failure.
absl::Status WriteFolderAtomically(const std::string& output,
                                   const std::function<absl::Status(const std::string&)>& write);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_OUTPUT_FOLDER_H_
