#include "lib/util/folder_lock.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>
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

// A lock that made folders, as ReleaseOnStopSignals' handler reads it: fixed buffers, published
// by `state`.
struct HeldLock {
  enum State { kFree, kWriting, kHeld };
  std::atomic<int> state{kFree};
  char folder[PATH_MAX];  // the deepest folder Acquire makes
  int made = 0;           // how many of `folder` and its parents Acquire makes
};
constexpr int kMaxHeldLocks = 16;
HeldLock g_held_locks[kMaxHeldLocks];

// Publishes a lock whose Acquire makes `made_folders` (the deepest first), before it makes them: a
// signal between the mkdir and the lock file finds them. A full table or a path too long leaves it
// to its destructor alone.
void Publish(const std::vector<std::string>& made_folders) {
  if (made_folders.empty() || made_folders.front().size() >= PATH_MAX) return;
  for (HeldLock& held : g_held_locks) {
    int expected = HeldLock::kFree;
    if (!held.state.compare_exchange_strong(expected, HeldLock::kWriting)) continue;
    std::memcpy(held.folder, made_folders.front().c_str(), made_folders.front().size() + 1);
    held.made = static_cast<int>(made_folders.size());
    held.state = HeldLock::kHeld;
    return;
  }
}

void Unpublish(const std::string& folder) {
  for (HeldLock& held : g_held_locks) {
    if (held.state == HeldLock::kHeld && folder == held.folder) {
      held.state = HeldLock::kFree;
      return;
    }
  }
}

// HoldsOnlyTheLock with system calls alone (a signal handler's); an empty or missing folder too
// (the signal came before Acquire made it or its lock file).
bool HoldsAtMostTheLockNow(const char* folder) {
  const int fd = ::open(folder, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT;
  alignas(struct dirent64) char entries[4096];
  long read = 0;
  bool only_the_lock = true;
  while (only_the_lock && (read = ::syscall(SYS_getdents64, fd, entries, sizeof(entries))) > 0) {
    for (long at = 0; at < read;) {
      const auto* entry = reinterpret_cast<const struct dirent64*>(entries + at);
      const char* name = entry->d_name;
      if (std::strcmp(name, ".") != 0 && std::strcmp(name, "..") != 0 &&
          std::strcmp(name, kLockFileName) != 0) {
        only_the_lock = false;
      }
      at += entry->d_reclen;
    }
  }
  ::close(fd);
  return only_the_lock && read == 0;
}

// ReleaseOnStopSignals' handler: what ~FolderLock does for each held lock, the newest first.
void ReleaseHeldLocksAndEnd(int signal) {
  for (int i = kMaxHeldLocks - 1; i >= 0; --i) {
    HeldLock& held = g_held_locks[i];
    if (held.state != HeldLock::kHeld || !HoldsAtMostTheLockNow(held.folder)) continue;
    char path[PATH_MAX + sizeof(kLockFileName) + 1];
    const size_t length = std::strlen(held.folder);
    std::memcpy(path, held.folder, length);
    path[length] = '/';
    std::memcpy(path + length + 1, kLockFileName, sizeof(kLockFileName));
    if (::unlink(path) != 0 && errno != ENOENT) continue;
    path[length] = '\0';  // the folder, then each parent Acquire made (or was about to)
    for (int level = 0; level < held.made && (::rmdir(path) == 0 || errno == ENOENT); ++level) {
      char* slash = std::strrchr(path, '/');
      if (slash == nullptr) break;
      *slash = '\0';
    }
  }
  // Blocked until this handler returns, then the default action ends the process.
  std::signal(signal, SIG_DFL);
  std::raise(signal);
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
  Publish(made_folders);
  const std::string path = absl::StrCat(folder, "/", kLockFileName);
  // A lock file that cannot be made or written (a full disk) leaves no folder this call made.
  const auto unpublish = [&made_folders] {
    if (!made_folders.empty()) Unpublish(made_folders.front());
  };
  const auto unmake = [&made_folders, &path, &unpublish](absl::Status why) {
    unpublish();
    if (!made_folders.empty()) {
      ::unlink(path.c_str());
      for (const std::string& made : made_folders) {
        if (::rmdir(made.c_str()) != 0 && errno != ENOENT) break;
      }
    }
    return why;
  };
  if (absl::Status made = MakeFolder(folder); !made.ok()) return unmake(std::move(made));
  // Close-on-exec: a command the run starts (a reward scorer) must not keep the lock.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return unmake(ErrnoError("open", path));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int lock_errno = errno;
    ::close(fd);
    if (lock_errno != EWOULDBLOCK) {
      errno = lock_errno;
      return unmake(ErrnoError("lock", path));
    }
    unpublish();  // another holder's folders now
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

void FolderLock::ReleaseOnStopSignals() {
  struct sigaction action {};
  action.sa_handler = ReleaseHeldLocksAndEnd;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);
  sigaddset(&action.sa_mask, SIGTERM);
  sigaddset(&action.sa_mask, SIGHUP);
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (::sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      ::sigaction(signal, &action, nullptr);
    }
  }
}

FolderLock::~FolderLock() {
  if (!made_folders_.empty()) Unpublish(made_folders_.front());
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
