#ifndef TITAN_LIB_UTIL_FOLDER_LOCK_H_
#define TITAN_LIB_UTIL_FOLDER_LOCK_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace titan {

// An exclusive lock on a folder (flock on <folder>/.titan.lock), held until it is destroyed or
// the process ends (kill -9 included), so that two runs never write one folder at once. The lock
// file keeps the holder's pid for the refusal; it is not removed (a lock, not a marker), except
// with the folders Acquire made when the holder let them go holding nothing else: a run refused
// before it wrote anything leaves no trace.
class FolderLock {
 public:
  // Creates `folder` (and missing parents) if missing. Fails with FailedPrecondition naming the
  // holder's pid when another process holds the lock, and with AlreadyExists when this process does
  // (two of its folder keys name one folder).
  static absl::StatusOr<std::unique_ptr<FolderLock>> Acquire(const std::string& folder);
  // As Acquire, but on `folder` itself (flock on its own descriptor), writing nothing into it: for
  // an output folder that must stay empty until written whole. The refusal names no pid.
  static absl::StatusOr<std::unique_ptr<FolderLock>> AcquireOnFolder(const std::string& folder);
  // OK unless another process holds `folder`'s Acquire lock (a run writes there): then
  // FailedPrecondition naming its pid. Takes nothing; a folder without a lock file is free.
  static absl::Status CheckNotHeld(const std::string& folder);
  // Until the process handles SIGINT/SIGTERM/SIGHUP itself (a run's StopSignal once it trains), one
  // of them, which ends it at once by default, first lets the held locks go as their destructors do
  // (a folder Acquire made that holds nothing else goes), so that a run stopped while it starts
  // leaves no trace; then the signal ends the process as before. A signal ignored stays ignored.
  static void ReleaseOnStopSignals();

  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock();

 private:
  FolderLock(int fd, std::string lock_path, std::vector<std::string> made_folders)
      : fd_(fd), lock_path_(std::move(lock_path)), made_folders_(std::move(made_folders)) {}

  int fd_;
  std::string lock_path_;                  // empty: AcquireOnFolder's
  std::vector<std::string> made_folders_;  // the folders Acquire created, the deepest first
};

// Locks let go in the reverse order of taking: a folder made inside another goes first.
class FolderLocks {
 public:
  FolderLocks() = default;
  FolderLocks(FolderLocks&&) = default;
  FolderLocks& operator=(FolderLocks&&) = default;
  ~FolderLocks();

  void Add(std::unique_ptr<FolderLock> lock) { locks_.push_back(std::move(lock)); }

 private:
  std::vector<std::unique_ptr<FolderLock>> locks_;
};

}  // namespace titan

#endif  // TITAN_LIB_UTIL_FOLDER_LOCK_H_
