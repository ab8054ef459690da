#include "lib/interop/output_folder.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "glog/logging.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Whether `name` is what a conversion killed mid-write leaves in its output: a --to=titan's step
// temporary, or the temporary of a file written atomically (--to=meta's).
bool IsInterruptedWrite(absl::string_view name) {
  return IsStepTemporaryName(name) || AtomicWriteTarget(name).has_value();
}

// Whether `folder` is this process's working directory: renamed onto, it would leave the shell
// that started the conversion in a removed folder that shows none of the export.
bool IsWorkingDirectory(const std::string& folder) {
  char working[PATH_MAX];
  char resolved[PATH_MAX];
  return ::getcwd(working, sizeof(working)) != nullptr &&
         ::realpath(folder.c_str(), resolved) != nullptr && std::strcmp(working, resolved) == 0;
}

// The directory `path` names when it is a symlink (a directory renamed onto a link fails: the
// rename must replace the directory it points to), else `path` without a trailing slash.
absl::StatusOr<std::string> RenameTarget(const std::string& path) {
  const std::string target(absl::StripSuffix(path, "/"));
  struct stat info;
  if (::lstat(target.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return target;
  char resolved[PATH_MAX];
  if (::realpath(target.c_str(), resolved) == nullptr) return ErrnoError("resolve link", target);
  return std::string(resolved);
}

// Gives `folder`, which is to replace a folder with the status `original`, that folder's group
// (where this process may: a group it is not in is refused) and mode bits, setgid and sticky
// included, plus `owner_bits` (the owner writes the export even into a read-only folder).
absl::Status TakeGroupAndMode(const struct stat& original, const std::string& folder,
                              mode_t owner_bits) {
  if (::chown(folder.c_str(), static_cast<uid_t>(-1), original.st_gid) != 0 && errno != EPERM) {
    return ErrnoError("chown", folder);
  }
  if (::chmod(folder.c_str(), (original.st_mode & 07777) | owner_bits) != 0) {
    return ErrnoError("chmod", folder);
  }
  return absl::OkStatus();
}

}  // namespace

// An output directory that does not exist or is empty (a rename may replace an empty directory),
// but for what interrupted conversions left (IsInterruptedWrite), which is returned.
absl::StatusOr<std::vector<std::string>> CheckOutputIsFree(const std::string& output) {
  if (!PathExists(output)) return std::vector<std::string>();
  TITAN_ASSIGN_OR_RETURN(std::vector<std::string> entries, ListDirectory(output));
  for (const std::string& name : entries) {
    if (!IsInterruptedWrite(name)) {
      return absl::AlreadyExistsError(absl::StrCat(output, ": exists and is not empty"));
    }
  }
  return entries;
}

// `path` with its "." and ".." components resolved, so that the folder it names can be made,
// renamed onto and removed ("out/." cannot be): the part that exists as realpath reads it (links
// resolved, as the kernel reads "link/.."), the rest, which the conversion makes, by its names.
// A path without such components is returned as given, so that errors name what was typed.
absl::StatusOr<std::string> ResolveDotComponents(const std::string& path) {
  const std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  if (std::none_of(parts.begin(), parts.end(),
                   [](const std::string& part) { return part == "." || part == ".."; })) {
    return path;
  }
  const std::string root = absl::StartsWith(path, "/") ? "/" : ".";
  const auto prefix = [&](size_t count) {
    return JoinPath(root, absl::StrJoin(parts.begin(), parts.begin() + count, "/"));
  };
  size_t existing = parts.size();
  while (existing > 0 && !PathExists(prefix(existing))) --existing;
  char resolved_prefix[PATH_MAX];
  if (::realpath(prefix(existing).c_str(), resolved_prefix) == nullptr) {
    return ErrnoError("resolve", prefix(existing));
  }
  std::string resolved = resolved_prefix;
  for (size_t i = existing; i < parts.size(); ++i) {
    if (parts[i] == "..") {
      resolved = Dirname(resolved);
    } else if (parts[i] != ".") {
      resolved = JoinPath(resolved, parts[i]);
    }
  }
  return resolved;
}

// Removes everything in `folder`, which held nothing when the caller's write into it began.
absl::Status EmptyFolder(const std::string& folder) {
  TITAN_ASSIGN_OR_RETURN(const std::vector<std::string> names, ListDirectory(folder));
  for (const std::string& name : names) {
    TITAN_RETURN_IF_ERROR(RemoveTree(absl::StrCat(folder, "/", name)));
  }
  return absl::OkStatus();
}

// Locks `output` (made if missing) against other conversions, checks that it is free under the
// lock, and removes what an interrupted conversion left in it: no other run writes there now.
absl::StatusOr<std::unique_ptr<FolderLock>> LockFreeOutput(const std::string& output) {
  // Inside a running trainer's folder a new step-like folder would be counted as its checkpoint.
  TITAN_ASSIGN_OR_RETURN(const std::string target, RenameTarget(output));
  TITAN_RETURN_IF_ERROR(FolderLock::CheckNotHeld(Dirname(target)));
  TITAN_ASSIGN_OR_RETURN(std::unique_ptr<FolderLock> lock, FolderLock::AcquireOnFolder(output));
  TITAN_ASSIGN_OR_RETURN(const std::vector<std::string> leftovers, CheckOutputIsFree(output));
  for (const std::string& name : leftovers) {
    LOG(WARNING) << "Removing " << output << "/" << name << " left by an interrupted conversion";
    TITAN_RETURN_IF_ERROR(RemoveTree(absl::StrCat(output, "/", name)));
  }
  return lock;
}

absl::Status WriteFolderAtomically(const std::string& output,
                                   const std::function<absl::Status(const std::string&)>& write) {
  TITAN_ASSIGN_OR_RETURN(const std::string target, RenameTarget(output));
  if (IsWorkingDirectory(target)) {
    absl::Status status = write(target);
    if (status.ok()) status = FsyncDirectory(target);
    if (status.ok()) return status;
    EmptyFolder(target).IgnoreError();  // The write's error is the one to report.
    return status;
  }
  const std::string parent = Dirname(target);
  const std::string temporary_prefix = target.substr(target.find_last_of('/') + 1) + ".tmp-";
  TITAN_RETURN_IF_ERROR(MakeDirectories(parent));
  TITAN_ASSIGN_OR_RETURN(std::vector<std::string> siblings, ListDirectory(parent));
  for (const std::string& name : siblings) {
    if (absl::StartsWith(name, temporary_prefix)) {
      TITAN_RETURN_IF_ERROR(RemoveTree(absl::StrCat(parent, "/", name)));
    }
  }
  struct stat original;
  const bool replaces = ::stat(target.c_str(), &original) == 0;
  const std::string tmp = absl::StrCat(target, ".tmp-", ::getpid());
  TITAN_RETURN_IF_ERROR(MakeDirectories(tmp));
  // Group first: files made in a setgid folder take its group, and chmod drops setgid for a group
  // this process is not in.
  absl::Status status = replaces ? TakeGroupAndMode(original, tmp, S_IRWXU) : absl::OkStatus();
  if (status.ok()) status = write(tmp);
  if (status.ok()) status = FsyncDirectory(tmp);
  if (status.ok() && replaces) status = TakeGroupAndMode(original, tmp, 0);
  if (status.ok() && ::rename(tmp.c_str(), target.c_str()) != 0) {
    status = ErrnoError("rename to " + target, tmp);
  }
  if (!status.ok()) {
    RemoveTree(tmp).IgnoreError();  // The write's error is the one to report.
    return status;
  }
  return FsyncDirectory(parent);
}

}  // namespace titan
