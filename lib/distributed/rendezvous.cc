#include "lib/distributed/rendezvous.h"

#include <chrono>
#include <exception>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace titan {

absl::StatusOr<std::shared_ptr<Rendezvous>> Rendezvous::Connect(const DistributedEnv& env,
                                                                const RendezvousOptions& options) {
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = env.rank == 0;
  store_options.numWorkers = env.world_size;
  store_options.waitWorkers = true;
  store_options.timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(options.timeout));
  if (env.rank == 0 && options.listen_fd >= 0) store_options.masterListenFd = options.listen_fd;
  std::string reason;
  try {
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
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
