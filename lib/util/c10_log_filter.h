#ifndef TITAN_LIB_UTIL_C10_LOG_FILTER_H_
#define TITAN_LIB_UTIL_C10_LOG_FILTER_H_

#include <string>

#include "absl/strings/string_view.h"

namespace titan {

// LibTorch's own log lines (c10's logger writes each message to std::cerr in one write, "[W1206
// 07:09:20.890694979 TCPStore.cpp:340] [c10d] ...") often end with a c10::Error's what(): the
// message, then "Exception raised from ... (most recent call first):" and one "frame #N: ..." line
// per C++ frame. Makes every later write to std::cerr lose those backtraces (the message stays),
// and drop c10's info and warning lines written by a thread inside a QuietC10Warnings. Once per
// process; call it before any thread starts.
void FilterC10LogOutput();

// While one lives, c10's info and warning lines from this thread are dropped (once
// FilterC10LogOutput ran): around store calls whose failure titan reports itself, where c10d's
// warning ("recvValue failed on SocketImpl(...)", "retrying (try=3, ...)") would only repeat it.
class QuietC10Warnings {
 public:
  QuietC10Warnings();
  ~QuietC10Warnings();
  QuietC10Warnings(const QuietC10Warnings&) = delete;
  QuietC10Warnings& operator=(const QuietC10Warnings&) = delete;
};

// `text` without the C++ backtraces c10::Error::what() appends: each "\nException raised from "
// line with the "frame #N: ..." lines after it.
std::string WithoutC10Backtraces(absl::string_view text);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_C10_LOG_FILTER_H_
