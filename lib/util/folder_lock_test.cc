#include "lib/util/folder_lock.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

std::string TestFolder(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

TEST(FolderLockTest, AnotherProcessIsRefusedUntilTheFirstLetsGo) {
  const std::string folder = TestFolder("run/dump");
  int ready[2];
  int release[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(release), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The other run: holds the lock until the parent closes its end of `release`.
    absl::StatusOr<std::unique_ptr<FolderLock>> held = FolderLock::Acquire(folder);
    const char byte = held.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &byte, 1);
    ::close(release[1]);
    char unused;
    (void)!::read(release[0], &unused, 1);
    ::_exit(0);
  }
  ::close(release[0]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 'y');
  absl::StatusOr<std::unique_ptr<FolderLock>> second = FolderLock::Acquire(folder);
  ::close(release[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            absl::StrCat(folder, " is in use by another run (pid ", child,
                         "); wait for it to end or use another folder"));
  EXPECT_TRUE(FolderLock::Acquire(folder).ok());
}

TEST(FolderLockTest, ThisProcessLockingAFolderTwiceIsNotCalledAnotherRun) {
  const std::string folder = TestFolder("twice/dump");
  absl::StatusOr<std::unique_ptr<FolderLock>> first = FolderLock::Acquire(folder);
  ASSERT_TRUE(first.ok()) << first.status();
  // The same folder under another name, as a checkpoint folder of "." would give.
  absl::StatusOr<std::unique_ptr<FolderLock>> second = FolderLock::Acquire(folder + "/.");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(second.status().message(),
            absl::StrCat(folder,
                         "/. is already locked by this process: another of its folders is "
                         "the same one"));
  first->reset();
  EXPECT_TRUE(FolderLock::Acquire(folder).ok());
}

// A lock on the folder itself leaves it empty, and holds off a second holder until released.
TEST(FolderLockTest, LockOnTheFolderItselfWritesNothingIntoIt) {
  const std::string folder = TestFolder("output");
  absl::StatusOr<std::unique_ptr<FolderLock>> first = FolderLock::AcquireOnFolder(folder);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(std::filesystem::is_empty(folder));
  absl::StatusOr<std::unique_ptr<FolderLock>> second = FolderLock::AcquireOnFolder(folder);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            absl::StrCat(folder,
                         " is being written by another run; wait for it to end or use another "
                         "folder"));
  first->reset();
  EXPECT_TRUE(FolderLock::AcquireOnFolder(folder).ok());
}

TEST(FolderLockTest, FoldersItMadeAreRemovedWhenLeftHoldingOnlyTheLock) {
  const std::string top = TestFolder("made");
  {
    FolderLocks locks;
    absl::StatusOr<std::unique_ptr<FolderLock>> dump = FolderLock::Acquire(top + "/run/dump/");
    ASSERT_TRUE(dump.ok()) << dump.status();
    locks.Add(*std::move(dump));
    // Taken second, inside the first: let go first, so the first is empty by its turn.
    absl::StatusOr<std::unique_ptr<FolderLock>> inner = FolderLock::Acquire(top + "/run/dump/ckpt");
    ASSERT_TRUE(inner.ok()) << inner.status();
    locks.Add(*std::move(inner));
    EXPECT_TRUE(std::filesystem::exists(top + "/run/dump/ckpt/.titan.lock"));
  }
  EXPECT_FALSE(std::filesystem::exists(top));
}

// A lock file that cannot be written (a full disk; here a file size limit of 0 bytes) fails the
// Acquire naming it, and leaves none of the folders the Acquire made.
TEST(FolderLockTest, ALockFileThatCannotBeWrittenLeavesNoFolderItMade) {
  const std::string top = TestFolder("unwritable");
  const std::string folder = top + "/run/dump";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead of killing the child
    const struct rlimit no_bytes = {0, 0};
    if (::setrlimit(RLIMIT_FSIZE, &no_bytes) != 0) ::_exit(2);
    const absl::StatusOr<std::unique_ptr<FolderLock>> lock = FolderLock::Acquire(folder);
    ::_exit(!lock.ok() && lock.status().message() ==
                              absl::StrCat(folder, "/.titan.lock: write failed: File too large")
                ? 0
                : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the Acquire succeeded or named something else";
  EXPECT_FALSE(std::filesystem::exists(top));
}

// A stop signal that ends the process at once (a run stopped while it starts) lets the locks go
// first: the folders Acquire made go when they hold nothing else, one that was there keeps its
// lock, and the signal still ends the process.
TEST(FolderLockTest, AStopSignalRemovesTheFoldersTheLocksMade) {
  const std::string top = TestFolder("stopped");
  const std::string kept = TestFolder("stopped_kept");
  std::filesystem::create_directories(kept);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FolderLock::ReleaseOnStopSignals();
    const auto dump = FolderLock::Acquire(top + "/run/dump");
    const auto inner = FolderLock::Acquire(top + "/run/dump/ckpt");
    const auto there = FolderLock::Acquire(kept);
    if (!dump.ok() || !inner.ok() || !there.ok()) ::_exit(1);
    std::raise(SIGTERM);
    ::_exit(2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_FALSE(std::filesystem::exists(top));
  EXPECT_TRUE(std::filesystem::exists(kept + "/.titan.lock"));
}

// A signal between Acquire's mkdir and its lock file (here: the lock file gone) still removes the
// folder, and so the folders around it.
TEST(FolderLockTest, AStopSignalBeforeTheLockFileRemovesTheFolderMade) {
  const std::string top = TestFolder("stopped_before_lock_file");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FolderLock::ReleaseOnStopSignals();
    const auto dump = FolderLock::Acquire(top + "/dump");
    const auto tb = FolderLock::Acquire(top + "/dump/tb");
    if (!dump.ok() || !tb.ok() || ::unlink((top + "/dump/tb/.titan.lock").c_str()) != 0) {
      ::_exit(1);
    }
    std::raise(SIGTERM);
    ::_exit(2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_FALSE(std::filesystem::exists(top));
}

// A hangup (the terminal gone) is a stop signal too, as titan_train's StopSignal takes it.
TEST(FolderLockTest, AHangupRemovesTheFoldersTheLocksMade) {
  const std::string top = TestFolder("hung_up");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FolderLock::ReleaseOnStopSignals();
    const auto dump = FolderLock::Acquire(top + "/dump");
    if (!dump.ok()) ::_exit(1);
    std::raise(SIGHUP);
    ::_exit(2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGHUP);
  EXPECT_FALSE(std::filesystem::exists(top));
}

// A folder holding more than the lock stays, lock file and all, as when the lock is let go.
TEST(FolderLockTest, AStopSignalKeepsAFolderThatHoldsMore) {
  const std::string top = TestFolder("stopped_with_files");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    FolderLock::ReleaseOnStopSignals();
    const auto dump = FolderLock::Acquire(top + "/dump");
    const auto inner = FolderLock::Acquire(top + "/dump/ckpt");
    if (!dump.ok() || !inner.ok()) ::_exit(1);
    { std::ofstream(top + "/dump/metrics.jsonl") << "{}\n"; }
    std::raise(SIGTERM);
    ::_exit(2);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit status " << WEXITSTATUS(status);
  EXPECT_FALSE(std::filesystem::exists(top + "/dump/ckpt"));
  EXPECT_TRUE(std::filesystem::exists(top + "/dump/.titan.lock"));
  EXPECT_TRUE(std::filesystem::exists(top + "/dump/metrics.jsonl"));
}

// A file where the folder goes is no lock this process holds (AlreadyExists is that).
TEST(FolderLockTest, AFileInTheFoldersPlaceIsAFailedPrecondition) {
  const std::string path = TestFolder("a_file");
  { std::ofstream(path) << "mine\n"; }
  absl::StatusOr<std::unique_ptr<FolderLock>> lock = FolderLock::Acquire(path);
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(lock.status().message(),
            absl::StrCat(path, ": is a file, not a folder (mkdir cannot make a folder there)"));
}

TEST(FolderLockTest, FoldersWrittenIntoOrThereBeforeAreKept) {
  const std::string before = TestFolder("before");
  std::filesystem::create_directories(before);
  FolderLock::Acquire(before)->reset();
  EXPECT_TRUE(std::filesystem::exists(before + "/.titan.lock"));

  const std::string written = TestFolder("written/dump");
  {
    absl::StatusOr<std::unique_ptr<FolderLock>> lock = FolderLock::Acquire(written);
    ASSERT_TRUE(lock.ok()) << lock.status();
    std::filesystem::create_directories(written + "/step-1");
  }
  EXPECT_TRUE(std::filesystem::exists(written + "/.titan.lock"));
  EXPECT_TRUE(std::filesystem::exists(written + "/step-1"));
}

}  // namespace
}  // namespace titan
