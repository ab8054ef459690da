#include "lib/util/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

constexpr char kLockFileName[] = ".titan.lock";

// The folders MakeDirectories(`folder`) would create, the deepest first.
std::vector<std::string> MissingFolders(std::string folder) {
  while (folder.size() > 1 && folder.back() == '/') folder.pop_back();  // "out/" is "out"
  std::vector<std::string> missing;
  while (!folder.empty() && folder != "/" && !PathExists(folder)) {
    missing.push_back(folder);
    const size_t slash = folder.find_last_of('/');
    if (slash == std::string::npos) break;
    folder.resize(slash);
  }
  return missing;
}

// MakeDirectories, but a file in the way is FailedPrecondition: AlreadyExists is Acquire's for a
// folder this process holds.
absl::Status MakeFolder(const std::string& folder) {
  const absl::Status made = MakeDirectories(folder);
  if (absl::IsAlreadyExists(made)) return absl::FailedPreconditionError(made.message());
  return made;
}

// Whether `folder` holds nothing but its lock file.
bool HoldsOnlyTheLock(const std::string& folder) {
  const absl::StatusOr<std::vector<std::string>> names = ListDirectory(folder);
  return names.ok() && names->size() == 1 && names->front() == kLockFileName;
}

// The pid an Acquire lock file at `path` holds ("" when unreadable).
std::string HolderPid(const std::string& path) {
  const absl::StatusOr<std::string> holder = ReadFile(path);
  return std::string(holder.ok() ? absl::StripAsciiWhitespace(*holder) : "");
}

// "<folder> is in use by another run (pid N)", then `advice`.
absl::Status InUse(const std::string& folder, const std::string& pid, absl::string_view advice) {
  return absl::FailedPreconditionError(
      absl::StrCat(folder, " is in use by another run",
                   pid.empty() ? "" : absl::StrCat(" (pid ", pid, ")"), "; ", advice));
}

}  // namespace

absl::StatusOr<std::unique_ptr<FolderLock>> FolderLock::Acquire(const std::string& folder) {
  std::vector<std::string> made_folders = MissingFolders(folder);
  TITAN_RETURN_IF_ERROR(MakeFolder(folder));
  const std::string path = absl::StrCat(folder, "/", kLockFileName);
  // A lock file that cannot be made or written (a full disk) leaves no folder this call made.
  const auto unmake = [&made_folders, &path](absl::Status why) {
    if (!made_folders.empty()) {
      ::unlink(path.c_str());
      for (const std::string& made : made_folders) {
        if (::rmdir(made.c_str()) != 0) break;
      }
    }
    return why;
  };
  // Close-on-exec: a command the run starts (a reward scorer) must not keep the lock.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return unmake(ErrnoError("open", path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int lock_errno = errno;
    ::close(fd);
    if (lock_errno != EWOULDBLOCK) {
      errno = lock_errno;
      return ErrnoError("lock", path);
    }
    const std::string pid = HolderPid(path);
    // flock refuses a second open file of this process too: that is no other run.
    if (pid == absl::StrCat(::getpid())) {
      return absl::AlreadyExistsError(absl::StrCat(
          folder, " is already locked by this process: another of its folders is the same one"));
    }
    return InUse(folder, pid, "wait for it to end or use another folder");
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    absl::Status why = ErrnoError("write", path);
    ::close(fd);
    return unmake(std::move(why));
  }
  return std::unique_ptr<FolderLock>(new FolderLock(fd, path, std::move(made_folders)));
}

absl::StatusOr<std::unique_ptr<FolderLock>> FolderLock::AcquireOnFolder(const std::string& folder) {
  TITAN_RETURN_IF_ERROR(MakeFolder(folder));
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", folder);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int lock_errno = errno;
    ::close(fd);
    errno = lock_errno;
    if (lock_errno != EWOULDBLOCK) return ErrnoError("lock", folder);
    return absl::FailedPreconditionError(absl::StrCat(
        folder, " is being written by another run; wait for it to end or use another folder"));
  }
  return std::unique_ptr<FolderLock>(new FolderLock(fd, "", {}));
}

absl::Status FolderLock::CheckNotHeld(const std::string& folder) {
  const std::string path = absl::StrCat(folder, "/", kLockFileName);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::OkStatus();
  // A shared lock is refused while the holder's exclusive one stands.
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  if (!held) return absl::OkStatus();
  return InUse(folder, HolderPid(path), "write elsewhere, or wait for it to end");
}

FolderLock::~FolderLock() {
  // Unlinked while still held: a run starting now makes a lock file of its own.
  if (!made_folders_.empty() && HoldsOnlyTheLock(made_folders_.front()) &&
      ::unlink(lock_path_.c_str()) == 0) {
    for (const std::string& folder : made_folders_) {
      if (::rmdir(folder.c_str()) != 0) break;
    }
  }
  ::close(fd_);
}

FolderLocks::~FolderLocks() {
  while (!locks_.empty()) locks_.pop_back();
}

}  // namespace titan
