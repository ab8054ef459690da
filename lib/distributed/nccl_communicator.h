#ifndef TITAN_LIB_DISTRIBUTED_NCCL_COMMUNICATOR_H_
#define TITAN_LIB_DISTRIBUTED_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/distributed/communicator.h"
#include "lib/distributed/rendezvous.h"

namespace titan {

// A GPU communicator calling NCCL directly. Each operation runs on the communicator's own CUDA
// stream, after the work already queued on the caller's current stream (an event orders it);
// Work::Wait() makes the caller's current stream wait for it (another event), so the host blocks
// only as long as needed to enforce the timeout. On a timeout the NCCL communicator is aborted and
// the error names the operation, the group and the ranks that never started it (the same progress
// keys as the Gloo backend). Tensors must be CUDA tensors on `device`. Every member of
// `global_ranks` calls this with the same `name`; the NCCL unique id travels through the store.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    std::shared_ptr<Rendezvous> rendezvous, const std::string& name, std::vector<int> global_ranks,
    int device, absl::Duration timeout);

// CPU tensors to `cpu`, CUDA tensors to `gpu` (PyTorch's "cpu:gloo,cuda:nccl"); identity, barrier
// and timeouts from both. Both must be the same group.
std::unique_ptr<Communicator> CreateDeviceDispatchingCommunicator(
    std::unique_ptr<Communicator> cpu, std::unique_ptr<Communicator> gpu);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_NCCL_COMMUNICATOR_H_
