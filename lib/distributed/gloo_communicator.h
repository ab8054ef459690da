#ifndef TITAN_LIB_DISTRIBUTED_GLOO_COMMUNICATOR_H_
#define TITAN_LIB_DISTRIBUTED_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/distributed/comm_trace.h"
#include "lib/distributed/communicator.h"
#include "lib/distributed/rendezvous.h"

namespace titan {

// A CPU communicator on c10d's ProcessGroupGloo (what PyTorch's "gloo" backend is). Every member of
// `global_ranks` calls this with the same `name` (unique in the job; ParallelDims::GroupName gives
// one) and ranks; their order defines ranks within the group. Each operation is bounded by
// `timeout`; `trace` (optional) records them and dumps when one fails. Like Python, the process
// then ignores SIGPIPE: a write to a departed peer fails with c10d's error instead of killing it.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    std::shared_ptr<Rendezvous> rendezvous, const std::string& name, std::vector<int> global_ranks,
    absl::Duration timeout, std::shared_ptr<CommTrace> trace = nullptr);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_GLOO_COMMUNICATOR_H_
