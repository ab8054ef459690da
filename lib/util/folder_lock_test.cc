#include "lib/util/folder_lock.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(FolderLockTest, ASecondHolderIsRefusedUntilTheFirstLetsGo) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/run/dump");
  absl::StatusOr<std::unique_ptr<FolderLock>> first = FolderLock::Acquire(folder);
  ASSERT_TRUE(first.ok()) << first.status();
  // Another open of the lock file stands for another process: flock locks open files.
  absl::StatusOr<std::unique_ptr<FolderLock>> second = FolderLock::Acquire(folder);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.status().message(),
            absl::StrCat(folder, " is in use by another run (pid ", ::getpid(),
                         "); wait for it to end or use another folder"));
  first->reset();
  EXPECT_TRUE(FolderLock::Acquire(folder).ok());
}

}  // namespace
}  // namespace titan
