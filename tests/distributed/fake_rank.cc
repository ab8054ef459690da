// A stand-in for titan_train in launcher tests: with --nproc_per_node it launches itself; as a rank
// it behaves as FAKE_RANK_MODE says; the launcher's report_failure prints "report: <message>".
//   print:  prints its env and args to stdout, a line and an unterminated tail to stderr, exits 0.
//   fail:   rank FAKE_FAIL_RANK exits 3 after 200 ms; rank FAKE_STUBBORN_RANK ignores SIGTERM;
//           every other rank sleeps until killed.
//   wait:   prints "ready pid=P" and sleeps; on SIGUSR1 prints "rank R got SIGUSR1"; on SIGTERM
//           prints "rank R got SIGTERM" and exits 0, but rank FAKE_FAIL_RANK exits 1 (as a rank
//           whose collective with a wedged peer timed out) and rank FAKE_UNHANDLED_RANK dies of it
//           (as a rank that has not installed its handler yet). Rank FAKE_PLAIN_STDOUT_RANK prints
//           these on stderr (as titan_rl --json's rank 0 keeps stdout for its summary). SIGQUIT
//           ends a rank as by default, but rank FAKE_STUBBORN_RANK ignores it.
//   refuse: ignoring SIGTERM (every rank prints before the launcher's SIGKILL), prints
//           "fake_rank: refused" and "  its cause" on stderr ("fake_rank: refused alone" on rank
//           FAKE_FAIL_RANK), a log line before and one after, exits 1 three seconds later (rank
//           FAKE_FAIL_RANK one second later; its launcher gathers failure lines:
//           failure_line_prefix "fake_rank: ").
//   port:   prints "port held" when MASTER_PORT cannot be bound (else "port free"), " on ::1
//           too" when IPv6 loopback reaches it, and its
//           TITAN_STORE_LISTEN_FD; rank 0 first, then writes file FAKE_MARKER and waits for
//           SIGTERM; the others wait for that file, check, and exit 3.
//   slow:   prints "started pid=P", sleeps a second with SIGUSR1 left as the process start set it
//           (as a rank loading, or ending after its recorder is gone), exits 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/distributed/launcher.h"

namespace {

int g_term_exit_code = 0;
int g_note_fd = STDOUT_FILENO;  // where wait mode's lines go

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

void OnUsr1(int) {
  char message[64];
  int n = snprintf(message, sizeof(message), "rank %s got SIGUSR1\n", getenv("RANK"));
  (void)!write(g_note_fd, message, n);
}

void OnTerm(int) {
  char message[64];
  int n = snprintf(message, sizeof(message), "rank %s got SIGTERM\n", getenv("RANK"));
  (void)!write(g_note_fd, message, n);
  _exit(g_term_exit_code);
}

}  // namespace

int main(int argc, char** argv) {
  // SIGQUIT's default action dumps core: not into the test's folder.
  const rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    int nproc = 0;
    const bool separate = arg == "--nproc_per_node" && i + 1 < argc;
    if (separate) arg = argv[i + 1];
    if ((separate || absl::ConsumePrefix(&arg, "--nproc_per_node=")) &&
        absl::SimpleAtoi(arg, &nproc)) {
      titan::LaunchOptions options;
      options.grace_period = absl::Milliseconds(500);
      // Unset: -1, every rank's stdout prefixed.
      if (!absl::SimpleAtoi(Env("FAKE_PLAIN_STDOUT_RANK"), &options.plain_stdout_rank)) {
        options.plain_stdout_rank = -1;
      }
      options.report_failure = [](absl::string_view message) {
        printf("report: %s\n", std::string(message).c_str());
      };
      if (Env("FAKE_RANK_MODE") == "refuse") options.failure_line_prefix = "fake_rank: ";
      absl::StatusOr<int> status = titan::LaunchLocalRanks(nproc, argc, argv, options);
      if (!status.ok()) {
        fprintf(stderr, "%s\n", std::string(status.status().message()).c_str());
        return 1;
      }
      return *status;
    }
  }
  const std::string mode = Env("FAKE_RANK_MODE");
  const std::string rank = Env("RANK");
  if (mode == "print") {
    printf("rank=%s local_rank=%s world_size=%s local_world_size=%s master=%s:%s args=", rank.c_str(),
           Env("LOCAL_RANK").c_str(), Env("WORLD_SIZE").c_str(), Env("LOCAL_WORLD_SIZE").c_str(),
           Env("MASTER_ADDR").c_str(), Env("MASTER_PORT").c_str());
    for (int i = 1; i < argc; ++i) printf("%s%s", i > 1 ? "," : "", argv[i]);
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "to stderr\nunterminated tail");
    return 0;
  }
  if (mode == "fail") {
    if (rank == Env("FAKE_FAIL_RANK")) {
      usleep(200000);
      return 3;
    }
    if (rank == Env("FAKE_STUBBORN_RANK")) signal(SIGTERM, SIG_IGN);
    while (true) pause();
  }
  if (mode == "refuse") {
    signal(SIGTERM, SIG_IGN);
    fprintf(stderr, "log line\nfake_rank: refused%s\n  its cause\nI20261205 a later log line\n",
            rank == Env("FAKE_FAIL_RANK") ? " alone" : "");
    absl::SleepFor(absl::Seconds(rank == Env("FAKE_FAIL_RANK") ? 1 : 3));
    return 1;
  }
  if (mode == "slow") {
    printf("started pid=%d\n", static_cast<int>(getpid()));
    fflush(stdout);
    absl::SleepFor(absl::Seconds(1));
    return 0;
  }
  if (mode == "wait") {
    if (rank == Env("FAKE_FAIL_RANK")) g_term_exit_code = 1;
    if (rank == Env("FAKE_PLAIN_STDOUT_RANK")) g_note_fd = STDERR_FILENO;
    signal(SIGTERM, rank == Env("FAKE_UNHANDLED_RANK") ? SIG_DFL : OnTerm);
    signal(SIGUSR1, OnUsr1);
    if (rank == Env("FAKE_STUBBORN_RANK")) signal(SIGQUIT, SIG_IGN);
    dprintf(g_note_fd, "ready pid=%d\n", static_cast<int>(getpid()));
    while (true) pause();
  }
  if (mode == "port") {
    // Rank 0 checks first and then holds on; the others check after it has (FAKE_MARKER exists).
    const std::string marker = Env("FAKE_MARKER");
    for (int i = 0; rank != "0" && access(marker.c_str(), F_OK) != 0 && i < 400; ++i) {
      usleep(50000);
    }
    // Whether another process could take MASTER_PORT now, before any store started.
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(std::atoi(Env("MASTER_PORT").c_str())));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    const char* held = free ? "free" : errno == EADDRINUSE ? "held" : "error";
    // Whether the port answers on IPv6 loopback too, as a MASTER_ADDR=::1 would reach it.
    const int v6 = socket(AF_INET6, SOCK_STREAM, 0);
    sockaddr_in6 v6_addr{};
    v6_addr.sin6_family = AF_INET6;
    v6_addr.sin6_addr = in6addr_loopback;
    v6_addr.sin6_port = addr.sin_port;
    const bool v6_reached =
        v6 >= 0 && connect(v6, reinterpret_cast<sockaddr*>(&v6_addr), sizeof(v6_addr)) == 0;
    printf("port %s%s listen_fd=%s\n", held, v6_reached ? " on ::1 too" : "",
           Env("TITAN_STORE_LISTEN_FD").c_str());
    fflush(stdout);
    if (rank != "0") return 3;
    fclose(fopen(marker.c_str(), "w"));
    while (true) pause();  // Holding the port until the launcher stops it.
  }
  fprintf(stderr, "fake_rank: unknown FAKE_RANK_MODE \"%s\"\n", mode.c_str());
  return 2;
}
