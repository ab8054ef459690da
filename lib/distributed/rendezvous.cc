#include "lib/distributed/rendezvous.h"

#include <c10/util/Exception.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "lib/distributed/deadline_watch.h"
#include "lib/util/c10_log_filter.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

constexpr char kJoinedCount[] = "titan/rendezvous/joined";
constexpr char kEveryRankJoined[] = "titan/rendezvous/everyone";

// Announces this rank and waits (on the store's side, no polling) until every rank has; past
// `deadline` an error names the ranks that never announced themselves.
absl::Status AwaitEveryRank(c10d::Store& store, const DistributedEnv& env, absl::Duration timeout,
                            absl::Time deadline) {
  store.set(absl::StrCat(kJoinedCount, "/", env.rank), std::vector<uint8_t>{'1'});
  if (store.add(kJoinedCount, 1) == env.world_size) {
    store.set(kEveryRankJoined, std::vector<uint8_t>{'1'});
  }
  // The other ranks give up a little before the host, which serves their checks below till then.
  const absl::Duration early =
      env.rank == 0 ? absl::ZeroDuration() : std::min(timeout / 4, absl::Seconds(1));
  const absl::Duration left = std::max(deadline - early - absl::Now(), absl::Milliseconds(1));
  try {
    store.wait({kEveryRankJoined}, std::chrono::milliseconds(absl::ToInt64Milliseconds(left)));
    return absl::OkStatus();
  } catch (const c10::DistError&) {
    // A timeout: the ranks that never joined are named below (a store gone fails there).
  }
  std::vector<int> missing;
  for (int rank = 0; rank < env.world_size; ++rank) {
    if (!store.check({absl::StrCat(kJoinedCount, "/", rank)})) missing.push_back(rank);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("rendezvous: rank ", env.rank, " of ", env.world_size,
                   ": ranks that never joined the store at ", env.master_addr, ":", env.master_port,
                   " (MASTER_ADDR:MASTER_PORT) within ", absl::FormatDuration(timeout), ": ",
                   absl::StrJoin(missing, ", ")));
}

// Whether something listens at host:port: one TCP connection, retried until `deadline`. Before
// c10d's client, which retries its own connection past its timeout and logs a stack trace each
// time it gives up.
bool ListenerAppears(const std::string& host, int port, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  while (true) {
    addrinfo* found = nullptr;
    if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) == 0) {
      for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        bool connected = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
        if (!connected && errno == EINPROGRESS) {
          pollfd waiting{fd, POLLOUT, 0};
          const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
          int error = 0;
          socklen_t size = sizeof(error);
          connected = ::poll(&waiting, 1, static_cast<int>(std::max<int64_t>(left, 1))) == 1 &&
                      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
        }
        ::close(fd);
        if (connected) {
          ::freeaddrinfo(found);
          return true;
        }
      }
      ::freeaddrinfo(found);
    }
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(std::min(absl::Milliseconds(100), deadline - absl::Now()));
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<Rendezvous>> Rendezvous::Connect(const DistributedEnv& env,
                                                                const RendezvousOptions& options) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = env.rank == 0;
  store_options.numWorkers = env.world_size;
  // Every rank announces itself below instead: c10d's own wait only counts clients.
  store_options.waitWorkers = false;
  store_options.timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout));
  // The launcher's (or a test's) socket, bound before the ranks started: no race for the port.
  if (env.rank == 0 && env.store_listen_fd >= 0) store_options.masterListenFd = env.store_listen_fd;
  const absl::Time deadline = absl::Now() + options.timeout;
  const auto unreachable = [&](const std::string& reason) {
    // Hosting fails at once (the port taken); only reaching the store waits out the timeout.
    const std::string within =
        env.rank == 0 ? "" : absl::StrCat(" within ", absl::FormatDuration(options.timeout));
    return absl::UnavailableError(
        absl::StrCat("rendezvous: rank ", env.rank, " of ", env.world_size, " could not ",
                     env.rank == 0 ? "host" : "reach", " the store at ", env.master_addr, ":",
                     env.master_port, " (MASTER_ADDR:MASTER_PORT)", within, ": ", reason));
  };
  if (env.rank != 0 && !ListenerAppears(env.master_addr, env.master_port, deadline)) {
    return unreachable("nothing listens there (is rank 0 running, and MASTER_ADDR its host?)");
  }
  // c10d's client waits for the store's answer to its first request without a deadline: another
  // service on MASTER_PORT (one that reads and never answers) would hold this rank forever.
  const std::string no_answer = absl::StrCat(
      program_invocation_short_name, ": ",
      unreachable("something listens there but does not answer as a c10d store (is MASTER_PORT "
                  "another service's port?)")
          .message(),
      "\n");
  // c10d's client logs each retry with a backtrace ("retrying (try=3, ...): Ping failed"); the
  // failure is told once, below.
  QuietC10Warnings quiet;
  try {
    c10::intrusive_ptr<c10d::Store> store;
    RunWithDeadline(
        std::max(deadline - absl::Now(), absl::Milliseconds(1)),
        [&] { store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options); },
        [&no_answer] {
          // Not glog: ends the process while the constructor holds c10d's locks.
          std::fputs(no_answer.c_str(), stderr);
          std::fflush(stderr);
          std::_Exit(1);
        });
    TITAN_RETURN_IF_ERROR(AwaitEveryRank(*store, env, options.timeout, deadline));
    return std::shared_ptr<Rendezvous>(new Rendezvous(env, std::move(store)));
  } catch (const c10::Error& e) {
    return unreachable(e.what_without_backtrace());
  } catch (const std::exception& e) {
    return unreachable(e.what());
  }
}

}  // namespace titan
