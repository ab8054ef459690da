#ifndef TITAN_LIB_DISTRIBUTED_BACKEND_COMMUNICATOR_H_
#define TITAN_LIB_DISTRIBUTED_BACKEND_COMMUNICATOR_H_

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/distributed/comm_trace.h"
#include "lib/distributed/communicator.h"
#include "lib/distributed/group_state.h"

namespace titan {

// This process's position in `global_ranks` (the group rank), or an error naming the group.
absl::StatusOr<int> GroupRankOf(const std::string& name, const std::vector<int>& global_ranks,
                                int job_rank);

// A Communicator over one c10d backend (ProcessGroupGloo, ProcessGroupNCCL) of `group`: c10d runs
// the operations; this checks arguments, marks progress (so failures name the ranks that never
// arrived), records every operation in `trace` (may be null) and, when a Wait fails, asks every
// rank to dump its trace. Tensors must be on `device` (CPU, or one CUDA device). Wait() returns
// when c10d's wait does: host-side completion for Gloo, a stream dependency for NCCL.
std::unique_ptr<Communicator> MakeBackendCommunicator(std::shared_ptr<GroupState> group,
                                                      c10::intrusive_ptr<c10d::Backend> backend,
                                                      const std::string& backend_name,
                                                      c10::Device device, absl::Duration timeout,
                                                      std::shared_ptr<CommTrace> trace);

// The c10d backend under a communicator that MakeBackendCommunicator made; null for any other.
c10::intrusive_ptr<c10d::Backend> BackendOf(const Communicator& communicator);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_BACKEND_COMMUNICATOR_H_
