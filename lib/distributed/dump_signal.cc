#include "lib/distributed/dump_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace titan {
namespace {

constexpr char kNoRecorder[] =
    "SIGUSR1: no collective flight recorder runs in this process (yet, or any more); nothing to "
    "dump\n";
constexpr char kAlone[] =
    "SIGUSR1: a single process issues no collectives; no collective flight recorder, nothing to "
    "dump\n";

// A signal handler that writes `kMessage` to stderr (write(2): async-signal-safe).
template <const char* kMessage, size_t kSize>
void SayIgnored(int) {
  const int saved_errno = errno;
  (void)!write(STDERR_FILENO, kMessage, kSize - 1);
  errno = saved_errno;
}

void HandleDumpRequests(void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
}

}  // namespace

void IgnoreDumpRequests() { HandleDumpRequests(SayIgnored<kNoRecorder, sizeof(kNoRecorder)>); }

void IgnoreDumpRequestsAlone() { HandleDumpRequests(SayIgnored<kAlone, sizeof(kAlone)>); }

// An executable's .preinit_array runs before its shared libraries' initialisers (LibTorch's take
// about a second), which a static initialiser here would not: SIGUSR1 then cannot end a start-up.
[[gnu::used,
  gnu::section(".preinit_array")]] void (*const kIgnoreDumpRequestsAtStart)() = IgnoreDumpRequests;

}  // namespace titan
