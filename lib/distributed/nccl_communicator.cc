// ProcessGroupNCCL.hpp is compiled with the torch wheel's nccl.h (its layout depends on the NCCL
// version macros), and only exported c10d functions and Backend/Work virtuals are called.
#include "lib/distributed/nccl_communicator.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/distributed/backend_communicator.h"
#include "lib/distributed/deadline_watch.h"
#include "lib/distributed/group_state.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

class DeviceDispatchingCommunicator : public Communicator {
 public:
  DeviceDispatchingCommunicator(std::unique_ptr<Communicator> cpu,
                                std::unique_ptr<Communicator> gpu)
      : cpu_(std::move(cpu)), gpu_(std::move(gpu)) {}

  const std::string& name() const override { return cpu_->name(); }
  int rank() const override { return cpu_->rank(); }
  int size() const override { return cpu_->size(); }
  const std::vector<int>& global_ranks() const override { return cpu_->global_ranks(); }
  absl::Duration timeout() const override { return cpu_->timeout(); }
  void set_timeout(absl::Duration timeout) override {
    cpu_->set_timeout(timeout);
    gpu_->set_timeout(timeout);
  }

  absl::StatusOr<std::unique_ptr<Work>> AllReduce(at::Tensor tensor, ReduceOp op) override {
    return For(tensor).AllReduce(tensor, op);
  }
  absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) override {
    return For(input).AllGather(input, output);
  }
  absl::StatusOr<std::unique_ptr<Work>> ReduceScatter(at::Tensor input, at::Tensor output,
                                                      ReduceOp op) override {
    return For(input).ReduceScatter(input, output, op);
  }
  absl::StatusOr<std::unique_ptr<Work>> Broadcast(at::Tensor tensor, int root) override {
    return For(tensor).Broadcast(tensor, root);
  }
  absl::StatusOr<std::unique_ptr<Work>> Send(at::Tensor tensor, int dst, int tag) override {
    return For(tensor).Send(tensor, dst, tag);
  }
  absl::StatusOr<std::unique_ptr<Work>> Recv(at::Tensor tensor, int src, int tag) override {
    return For(tensor).Recv(tensor, src, tag);
  }
  absl::StatusOr<std::unique_ptr<Work>> BatchP2P(std::vector<P2POp> ops) override {
    if (ops.empty()) return cpu_->BatchP2P(std::move(ops));
    Communicator& backend = For(ops.front().tensor);
    for (const P2POp& op : ops) {
      if (&For(op.tensor) != &backend) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch_p2p on group \"", name(), "\": CPU and CUDA tensors in one batch"));
      }
    }
    return backend.BatchP2P(std::move(ops));
  }
  absl::StatusOr<std::unique_ptr<Work>> AllToAll(at::Tensor input, at::Tensor output) override {
    return For(input).AllToAll(input, output);
  }
  absl::StatusOr<std::unique_ptr<Work>> Barrier() override { return cpu_->Barrier(); }

 private:
  Communicator& For(const at::Tensor& tensor) {
    return tensor.defined() && tensor.is_cuda() ? *gpu_ : *cpu_;
  }

  const std::unique_ptr<Communicator> cpu_;
  const std::unique_ptr<Communicator> gpu_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    std::shared_ptr<Rendezvous> rendezvous, const std::string& name, std::vector<int> global_ranks,
    int device, absl::Duration timeout, std::shared_ptr<CommTrace> trace,
    const Communicator* split_from) {
  TITAN_ASSIGN_OR_RETURN(const int rank, GroupRankOf(name, global_ranks, rendezvous->env().rank));
  const int size = static_cast<int>(global_ranks.size());
  const c10::intrusive_ptr<c10d::Store>& store = rendezvous->store();
  auto group = std::make_shared<GroupState>(
      name, global_ranks, rank,
      c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("titan/nccl-progress/", name), store));
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> parent;
  if (split_from != nullptr) {
    parent = c10::dynamic_intrusive_pointer_cast<c10d::ProcessGroupNCCL>(BackendOf(*split_from));
    if (!parent) {
      return absl::InvalidArgumentError(absl::StrCat("group \"", name, "\": cannot split from \"",
                                                     split_from->name(),
                                                     "\", which is not an NCCL communicator"));
    }
  }
  const absl::Time start = absl::Now();
  try {
    group->MarkArrived(0);  // Operation #0 is joining the group.
    group->PublishProgress();  // at once: a member without the key never joined
    c10::intrusive_ptr<c10d::ProcessGroupNCCL::Options> options =
        c10d::ProcessGroupNCCL::Options::create();
    options->timeout = std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout));
    options->group_name = name;
    options->global_ranks_in_group.assign(global_ranks.begin(), global_ranks.end());
    if (parent) {
      options->split_from = parent;
      // One color per group of a split; the groups of one mesh dimension are disjoint, so their
      // smallest ranks differ.
      options->split_color = *std::min_element(global_ranks.begin(), global_ranks.end());
    }
    c10::intrusive_ptr<c10d::Backend> backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(
        c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("titan/nccl/", name), store), rank,
        size, options);
    // Connect (or split) now, all members together, rather than at the first operation. NCCL
    // waits for every member with no timeout of its own: a member that died never arrives. (The
    // straggler list reads the store, which may first wait out a blocked unique-id read; in a
    // split, the missing rank may be in another group of it.)
    RunWithDeadline(
        timeout,
        [&] {
          backend->eagerConnectSingleDevice(
              at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
        },
        [&] {
          std::string failure = "NCCL's connection is not made";
          try {  // a dead store must not hide the message below
            failure = std::string(group->Failure("create_group", 0, start, failure).message());
            if (trace) trace->DumpAllRanks(failure);
          } catch (const std::exception& e) {
            absl::StrAppend(&failure, " (", Reason(e), ")");
          }
          LOG(FATAL) << failure << "; ending this rank (a connecting NCCL communicator cannot be "
                     << "cancelled)";
        });
    if (trace) trace->RegisterWithC10d();
    return MakeBackendCommunicator(
        std::move(group), std::move(backend), "nccl",
        c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)), timeout,
        std::move(trace));
  } catch (const std::exception& e) {
    if (trace) trace->DumpAllRanks(absl::StrCat("joining group \"", name, "\": ", Reason(e)));
    return group->Failure("create_group", 0, start, Reason(e));
  }
}

std::unique_ptr<Communicator> CreateDeviceDispatchingCommunicator(
    std::unique_ptr<Communicator> cpu, std::unique_ptr<Communicator> gpu) {
  return std::make_unique<DeviceDispatchingCommunicator>(std::move(cpu), std::move(gpu));
}

}  // namespace titan
