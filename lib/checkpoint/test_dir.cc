#include "lib/checkpoint/test_dir.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lib/util/directory.h"

namespace titan {

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(
      tmp ? tmp : "/tmp", "/", testing::UnitTest::GetInstance()->current_test_info()->name(), "/",
      name);
  EXPECT_TRUE(RemoveTree(dir).ok());
  return dir;
}

}  // namespace titan
