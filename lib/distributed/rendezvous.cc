#include "lib/distributed/rendezvous.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  if (env.rank == 0 && options.listen_fd >= 0) store_options.masterListenFd = options.listen_fd;
  const absl::Time deadline = absl::Now() + options.timeout;
  std::string reason;
  try {
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
    TITAN_RETURN_IF_ERROR(AwaitEveryRank(*store, env, options.timeout, deadline));
    return std::shared_ptr<Rendezvous>(new Rendezvous(env, std::move(store)));
  } catch (const c10::Error& e) {
    reason = e.what_without_backtrace();
  } catch (const std::exception& e) {
    reason = e.what();
  }
  return absl::UnavailableError(absl::StrCat(
      "rendezvous: rank ", env.rank, " of ", env.world_size, " could not ",
      env.rank == 0 ? "host" : "reach", " the store at ", env.master_addr, ":", env.master_port,
      " (MASTER_ADDR:MASTER_PORT) within ", absl::FormatDuration(options.timeout), ": ", reason));
}

}  // namespace titan
