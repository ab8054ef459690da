#include "lib/distributed/dump_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace titan {
namespace {

void LogIgnoredDumpRequest(int) {
  const int saved_errno = errno;
  constexpr char kMessage[] =
      "SIGUSR1: no collective flight recorder runs in this process (yet, or any more); nothing "
      "to dump\n";
  (void)!write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  errno = saved_errno;
}

}  // namespace

void IgnoreDumpRequests() {
  struct sigaction action {};
  action.sa_handler = LogIgnoredDumpRequest;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
}

// An executable's .preinit_array runs before its shared libraries' initialisers (LibTorch's take
// about a second), which a static initialiser here would not: SIGUSR1 then cannot end a start-up.
[[gnu::used,
  gnu::section(".preinit_array")]] void (*const kIgnoreDumpRequestsAtStart)() = IgnoreDumpRequests;

}  // namespace titan
