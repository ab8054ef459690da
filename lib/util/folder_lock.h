#ifndef TITAN_LIB_UTIL_FOLDER_LOCK_H_
#define TITAN_LIB_UTIL_FOLDER_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace titan {

// An exclusive lock on a folder (flock on <folder>/.titan.lock), held until it is destroyed or
// the process ends (kill -9 included), so that two runs never write one folder at once. The lock
// file keeps the holder's pid for the refusal; it is not removed (a lock, not a marker).
class FolderLock {
 public:
  // Creates `folder` if missing. Fails with FailedPrecondition naming the holder's pid when
  // another process holds the lock, and with AlreadyExists when this process does (two of its
  // folder keys name one folder).
  static absl::StatusOr<std::unique_ptr<FolderLock>> Acquire(const std::string& folder);
  // As Acquire, but on `folder` itself (flock on its own descriptor), writing nothing into it: for
  // an output folder that must stay empty until written whole. The refusal names no pid.
  static absl::StatusOr<std::unique_ptr<FolderLock>> AcquireOnFolder(const std::string& folder);
  // OK unless another process holds `folder`'s Acquire lock (a run writes there): then
  // FailedPrecondition naming its pid. Takes nothing; a folder without a lock file is free.
  static absl::Status CheckNotHeld(const std::string& folder);

  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock();

 private:
  explicit FolderLock(int fd) : fd_(fd) {}

  int fd_;
};

}  // namespace titan

#endif  // TITAN_LIB_UTIL_FOLDER_LOCK_H_
