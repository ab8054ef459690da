#ifndef TITAN_LIB_DISTRIBUTED_COMMUNICATOR_H_
#define TITAN_LIB_DISTRIBUTED_COMMUNICATOR_H_

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace titan {

enum class ReduceOp { kSum, kProduct, kMin, kMax };

// One transfer of a BatchP2P: `tensor` to (send) or from (receive) group member `peer`.
struct P2POp {
  bool send = false;
  at::Tensor tensor;
  int peer = 0;
  int tag = 0;
};

// An operation in flight. Wait() returns when the operation is done (CPU tensors), or once the
// caller's CUDA stream waits for it (CUDA tensors; the host goes on). The communicator's timeout
// bounds the operation either way. On CPU a failed Wait names the collective, the group and the
// ranks that did not arrive; on CUDA c10d's watchdog finds the timeout, dumps the flight recorder
// and ends the process (its error handling), so Wait may never see it. A communicator whose
// operation failed is unusable (peers may be mid-transfer): the job should stop.
class Work {
 public:
  virtual ~Work() = default;
  virtual absl::Status Wait() = 0;
  // Whether the operation has finished (well or not), without blocking.
  virtual bool IsCompleted() = 0;
};

// Collectives over one process group. Every member calls the same operations in the same order
// from one thread; tensors stay untouched until their Work has been waited for. Ranks in arguments
// are positions in the group (0 .. size() - 1); global_ranks() maps them to job ranks.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual const std::string& name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::vector<int>& global_ranks() const = 0;
  virtual absl::Duration timeout() const = 0;
  // Applies to operations started afterwards.
  virtual void set_timeout(absl::Duration timeout) = 0;

  // In place, on every member.
  virtual absl::StatusOr<std::unique_ptr<Work>> AllReduce(at::Tensor tensor, ReduceOp op) = 0;
  // `output` holds size() × input.numel() elements: member r's input at [r·n, (r+1)·n) (flat).
  virtual absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) = 0;
  // `input` holds size() × output.numel() elements; member r gets the reduction of slice r.
  virtual absl::StatusOr<std::unique_ptr<Work>> ReduceScatter(at::Tensor input, at::Tensor output,
                                                              ReduceOp op) = 0;
  // `root`'s tensor, copied into every member's `tensor`.
  virtual absl::StatusOr<std::unique_ptr<Work>> Broadcast(at::Tensor tensor, int root) = 0;
  virtual absl::StatusOr<std::unique_ptr<Work>> Send(at::Tensor tensor, int dst, int tag) = 0;
  virtual absl::StatusOr<std::unique_ptr<Work>> Recv(at::Tensor tensor, int src, int tag) = 0;
  // Starts `ops` together, one Work for all. On NCCL they form one group (ncclGroupStart/End), so
  // they progress together whatever order the peers issued theirs in; separate sends and receives
  // run in order on one NCCL stream, where a send and a receive each waiting for the other's
  // turn deadlock; there a member may also send to itself. Gloo runs them as separate operations
  // (it matches them by tag).
  virtual absl::StatusOr<std::unique_ptr<Work>> BatchP2P(std::vector<P2POp> ops) = 0;
  // Equal splits: slice j of member i's input (flat, size() slices) lands in slice i of member j's
  // output.
  virtual absl::StatusOr<std::unique_ptr<Work>> AllToAll(at::Tensor input, at::Tensor output) = 0;
  // Completes once every member has reached it (and this member's earlier operations are done).
  virtual absl::StatusOr<std::unique_ptr<Work>> Barrier() = 0;
};

// Passes every call to `inner`: wrappers override only what they change.
class ForwardingCommunicator : public Communicator {
 public:
  explicit ForwardingCommunicator(Communicator* inner) : inner_(inner) {}  // not owned
  explicit ForwardingCommunicator(std::unique_ptr<Communicator> inner)
      : owned_(std::move(inner)), inner_(owned_.get()) {}

  const std::string& name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::vector<int>& global_ranks() const override { return inner_->global_ranks(); }
  absl::Duration timeout() const override { return inner_->timeout(); }
  void set_timeout(absl::Duration timeout) override { inner_->set_timeout(timeout); }
  absl::StatusOr<std::unique_ptr<Work>> AllReduce(at::Tensor tensor, ReduceOp op) override {
    return inner_->AllReduce(tensor, op);
  }
  absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) override {
    return inner_->AllGather(input, output);
  }
  absl::StatusOr<std::unique_ptr<Work>> ReduceScatter(at::Tensor input, at::Tensor output,
                                                      ReduceOp op) override {
    return inner_->ReduceScatter(input, output, op);
  }
  absl::StatusOr<std::unique_ptr<Work>> Broadcast(at::Tensor tensor, int root) override {
    return inner_->Broadcast(tensor, root);
  }
  absl::StatusOr<std::unique_ptr<Work>> Send(at::Tensor tensor, int dst, int tag) override {
    return inner_->Send(tensor, dst, tag);
  }
  absl::StatusOr<std::unique_ptr<Work>> Recv(at::Tensor tensor, int src, int tag) override {
    return inner_->Recv(tensor, src, tag);
  }
  absl::StatusOr<std::unique_ptr<Work>> BatchP2P(std::vector<P2POp> ops) override {
    return inner_->BatchP2P(std::move(ops));
  }
  absl::StatusOr<std::unique_ptr<Work>> AllToAll(at::Tensor input, at::Tensor output) override {
    return inner_->AllToAll(input, output);
  }
  absl::StatusOr<std::unique_ptr<Work>> Barrier() override { return inner_->Barrier(); }

 protected:
  Communicator* inner() const { return inner_; }

 private:
  std::unique_ptr<Communicator> owned_;  // null when not owned
  Communicator* inner_;
};

// Starts an operation and waits for it: the blocking form of every call above.
absl::Status Await(absl::StatusOr<std::unique_ptr<Work>> work);

// Every member's `value`, by group rank (two all-gathers on CPU tensors: the lengths, then the
// bytes padded to the longest).
absl::StatusOr<std::vector<std::string>> AllGatherStrings(Communicator& comm,
                                                          const std::string& value);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_COMMUNICATOR_H_
