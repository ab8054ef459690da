#include "lib/util/c10_log_filter.h"

#include <iostream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

// A c10d warning as LibTorch's logger writes it: the message, what() of a c10::Error (backtrace
// included), and the logger's newline.
constexpr char kBacktrace[] =
    "Exception raised from sendBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:653 (most "
    "recent call first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x9d (0x7fb2 in libc10.so)\n"
    "frame #1: <unknown function> + 0x16d00f4 (0x7fb1 in libtorch_cpu.so)\n";
const std::string kWarning = "[W1206 07:10:31.468636083 TCPStore.cpp:106] [c10d] sendBytes failed";
const std::string kWarningWithTrace = kWarning + ": Broken pipe\n" + kBacktrace + "\n";

TEST(WithoutC10BacktracesTest, KeepsTheMessageAndWhatFollowsTheFrames) {
  EXPECT_EQ(WithoutC10Backtraces(kWarningWithTrace), kWarning + ": Broken pipe\n");
  EXPECT_EQ(WithoutC10Backtraces("a: x\n" + std::string(kBacktrace) + "; retrying\nb\n"),
            "a: x; retrying\nb\n");
  EXPECT_EQ(WithoutC10Backtraces("a\n" + std::string(kBacktrace) + "b\n" + kBacktrace), "ab");
  EXPECT_EQ(WithoutC10Backtraces("no trace\nframe #0: kept\n"), "no trace\nframe #0: kept\n");
  // A backtrace cut short (no newline after its first line) goes whole.
  EXPECT_EQ(WithoutC10Backtraces("a\nException raised from x"), "a");
}

TEST(FilterC10LogOutputTest, StripsBacktracesAndQuietsWarningsOnTheQuietThreadOnly) {
  FilterC10LogOutput();
  FilterC10LogOutput();  // once per process: a second call changes nothing
  testing::internal::CaptureStderr();
  std::cerr << kWarningWithTrace;
  std::cerr << "titan_train: "
            << "failed: " << 3 << "\n";
  {
    QuietC10Warnings quiet;
    std::cerr << "[W1206 07:09:20.890694979 TCPStore.cpp:340] [c10d] retrying (try=0)\n";
    std::cerr << "[I1206 07:09:20.890694979 TCPStore.cpp:340] [c10d] info\n";
    std::cerr << "[E1206 07:09:20.890694979 TCPStore.cpp:340] [c10d] an error stays\n";
    std::thread([] { std::cerr << "[W1206 07:09:21.000000000 x.cpp:1] other thread\n"; }).join();
  }
  std::cerr << "[W1206 07:09:22.000000000 x.cpp:1] after the scope\n";
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            kWarning + ": Broken pipe\n" + "titan_train: failed: 3\n" +
                "[E1206 07:09:20.890694979 TCPStore.cpp:340] [c10d] an error stays\n"
                "[W1206 07:09:21.000000000 x.cpp:1] other thread\n"
                "[W1206 07:09:22.000000000 x.cpp:1] after the scope\n");
}

}  // namespace
}  // namespace titan
