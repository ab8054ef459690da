#include "lib/distributed/dump_signal.h"

#include <signal.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

// First in this file: nothing in the test has installed the handler yet, the process start did.
TEST(DumpSignalTest, HandledFromTheProcessStart) {
  struct sigaction current {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &current), 0);
  EXPECT_NE(current.sa_handler, SIG_DFL);
  EXPECT_NE(current.sa_handler, SIG_IGN);
}

TEST(DumpSignalTest, RequestIsLoggedAndIgnored) {
  IgnoreDumpRequests();
  testing::internal::CaptureStderr();
  ASSERT_EQ(raise(SIGUSR1), 0);  // its default action would end this test
  EXPECT_THAT(testing::internal::GetCapturedStderr(),
              testing::HasSubstr("SIGUSR1: no collective flight recorder runs in this process"));
}

}  // namespace
}  // namespace titan
