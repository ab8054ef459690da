#ifndef TITAN_LIB_DISTRIBUTED_RENDEZVOUS_H_
#define TITAN_LIB_DISTRIBUTED_RENDEZVOUS_H_

#include <memory>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/distributed/distributed_env.h"

namespace titan {

struct RendezvousOptions {
  // How long every rank waits for the others to connect (and store calls wait for keys).
  absl::Duration timeout = absl::Minutes(5);
};

// The job's key-value store (c10d's TCPStore, hosted by rank 0 at MASTER_ADDR:MASTER_PORT), which
// every process group bootstraps through. Connect returns once all world_size ranks have joined.
class Rendezvous {
 public:
  static absl::StatusOr<std::shared_ptr<Rendezvous>> Connect(
      const DistributedEnv& env, const RendezvousOptions& options = RendezvousOptions());

  const DistributedEnv& env() const { return env_; }
  const c10::intrusive_ptr<c10d::Store>& store() const { return store_; }

 private:
  Rendezvous(DistributedEnv env, c10::intrusive_ptr<c10d::Store> store)
      : env_(std::move(env)), store_(std::move(store)) {}

  DistributedEnv env_;
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_RENDEZVOUS_H_
