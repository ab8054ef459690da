#include "lib/distributed/communicator.h"

namespace titan {

absl::Status Await(absl::StatusOr<std::unique_ptr<Work>> work) {
  if (!work.ok()) return work.status();
  return (*work)->Wait();
}

}  // namespace titan
