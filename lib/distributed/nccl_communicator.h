#ifndef TITAN_LIB_DISTRIBUTED_NCCL_COMMUNICATOR_H_
#define TITAN_LIB_DISTRIBUTED_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/distributed/comm_trace.h"
#include "lib/distributed/communicator.h"
#include "lib/distributed/rendezvous.h"

namespace titan {

// A GPU communicator on c10d's ProcessGroupNCCL (PyTorch's "nccl" backend): its own CUDA stream per
// device, Work::Wait() as a stream dependency (the host does not block), and its watchdog thread
// enforcing `timeout` (TORCH_NCCL_* variables tune it; see the README). Tensors must be CUDA
// tensors on `device`. Every member of `global_ranks` calls this with the same `name`. With
// `split_from` (another NCCL communicator of this process whose group holds every rank, e.g. the
// world's) the NCCL communicator is split from its one (ncclCommSplit: a collective call over
// split_from's ranks, each calling with its own group); without, it connects through the store.
// Either way the connection is made now, not at the first operation; one not made within
// `timeout` (a member died or never called) ends the process after logging who never joined, as
// NCCL cannot cancel a connection. Ran on one H200 as one-member groups (nccl_communicator_test);
// groups of several GPUs have not run (one GPU is lent at a time).
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    std::shared_ptr<Rendezvous> rendezvous, const std::string& name, std::vector<int> global_ranks,
    int device, absl::Duration timeout, std::shared_ptr<CommTrace> trace = nullptr,
    const Communicator* split_from = nullptr);

// CPU tensors to `cpu`, CUDA tensors to `gpu` (PyTorch's "cpu:gloo,cuda:nccl"); identity, barrier
// and timeouts from both. Both must be the same group.
std::unique_ptr<Communicator> CreateDeviceDispatchingCommunicator(
    std::unique_ptr<Communicator> cpu, std::unique_ptr<Communicator> gpu);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_NCCL_COMMUNICATOR_H_
