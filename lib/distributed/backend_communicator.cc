#include "lib/distributed/backend_communicator.h"

#include <ATen/ATen.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/profiling/phase_range.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

std::chrono::milliseconds ToChrono(absl::Duration duration) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(duration)));
}

c10d::ReduceOp ToC10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case ReduceOp::kProduct:
      return c10d::ReduceOp(c10d::ReduceOp::PRODUCT);
    case ReduceOp::kMin:
      return c10d::ReduceOp(c10d::ReduceOp::MIN);
    case ReduceOp::kMax:
      return c10d::ReduceOp(c10d::ReduceOp::MAX);
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

// What a group's Work handles share with it.
struct Shared {
  std::shared_ptr<GroupState> state;
  std::shared_ptr<CommTrace> trace;
  std::shared_ptr<TraceGroup> trace_group;
  // The group's point-to-point operations, a trace group of their own: fr_trace (torch 2.11)
  // takes a collective and the point-to-point entry after it for one coalesced batch when the
  // collective's sequence number equals the entry's p2p one (both count from 1), and fails.
  std::shared_ptr<TraceGroup> p2p_trace_group;
  c10::Device device;

  TraceGroup* TraceGroupOf(bool p2p) const {
    return p2p ? p2p_trace_group.get() : trace_group.get();
  }
};

class BackendWork : public Work {
 public:
  // `works`: c10d's handles (one per operation, or one for a group); `trace_ids`: the operations'
  // trace entries in `trace_group`, all done when every handle is.
  BackendWork(std::shared_ptr<const Shared> shared,
              std::vector<c10::intrusive_ptr<c10d::Work>> works, std::string op, uint64_t seq,
              std::vector<TraceId> trace_ids, TraceGroup* trace_group, absl::Duration timeout)
      : shared_(std::move(shared)),
        works_(std::move(works)),
        op_(std::move(op)),
        seq_(seq),
        trace_ids_(std::move(trace_ids)),
        trace_group_(trace_group),
        timeout_(timeout),
        start_(absl::Now()) {}

  ~BackendWork() override {
    if (waited_ || !shared_->trace) return;
    for (const TraceId& id : trace_ids_) {
      shared_->trace->Retire(trace_group_, id, false);
    }
  }

  absl::Status Wait() override {
    if (waited_) return status_;
    waited_ = true;
    PhaseRange range("comm:", op_, ":wait");
    CommTrace* trace = shared_->trace.get();
    try {
      for (const auto& work : works_) {
        if (shared_->device.is_cpu()) {
          work->wait(ToChrono(timeout_));
        } else {
          // Only the caller's stream waits: given a timeout, c10d's wait would block the host
          // until the collective ends. Its watchdog thread enforces the group's timeout instead.
          work->wait();
        }
      }
    } catch (const std::exception& e) {
      const std::string reason = Reason(e);
      const absl::Time failed_at = absl::Now();
      if (trace != nullptr) {
        for (const TraceId& id : trace_ids_) trace->Fail(trace_group_, id);
        const std::string failure = absl::StrCat(op_, " #", seq_, " on group \"",
                                                 shared_->state->name(), "\" failed: ", reason);
        AskStoreAfterFailure(failure, [&] { trace->DumpAllRanks(failure); });
      }
      status_ = shared_->state->Failure(op_, seq_, start_, reason, failed_at);
      return status_;
    }
    if (trace == nullptr || !trace->enabled()) return status_;
    for (const TraceId& id : trace_ids_) {
      if (shared_->device.is_cpu()) {
        trace->Retire(trace_group_, id, true);
      } else {
        // c10d's wait only ordered the caller's stream after the operation: it is done when an
        // event recorded there now is.
        c10::Event done(shared_->device.type());
        done.record(c10::impl::VirtualGuardImpl(shared_->device.type()).getStream(shared_->device));
        trace->CompleteOn(id, std::move(done));
      }
    }
    return status_;
  }

  bool IsCompleted() override {
    return std::all_of(works_.begin(), works_.end(),
                       [](const auto& work) { return work->isCompleted(); });
  }

 private:
  const std::shared_ptr<const Shared> shared_;
  const std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  const std::string op_;
  const uint64_t seq_;
  const std::vector<TraceId> trace_ids_;
  TraceGroup* const trace_group_;  // Owned by shared_.
  const absl::Duration timeout_;
  const absl::Time start_;
  bool waited_ = false;
  absl::Status status_;
};

class BackendCommunicator : public Communicator {
 public:
  BackendCommunicator(std::shared_ptr<Shared> shared, c10::intrusive_ptr<c10d::Backend> backend,
                      std::string backend_name, absl::Duration timeout)
      : shared_(std::move(shared)),
        backend_(std::move(backend)),
        backend_name_(std::move(backend_name)),
        timeout_(timeout) {}

  const c10::intrusive_ptr<c10d::Backend>& backend() const { return backend_; }
  const std::string& name() const override { return state().name(); }
  int rank() const override { return state().rank(); }
  int size() const override { return state().size(); }
  const std::vector<int>& global_ranks() const override { return state().global_ranks(); }
  absl::Duration timeout() const override { return timeout_; }
  void set_timeout(absl::Duration timeout) override {
    timeout_ = timeout;
    // c10d's option (ProcessGroupNCCL's watchdog reads it); Gloo also takes it per operation.
    backend_->setTimeout(ToChrono(timeout));
  }

  absl::StatusOr<std::unique_ptr<Work>> AllReduce(at::Tensor tensor, ReduceOp op) override {
    TITAN_RETURN_IF_ERROR(CheckTensor("all_reduce", "tensor", tensor));
    return Start("all_reduce", "all_reduce", false, {tensor}, {tensor}, [&] {
      std::vector<at::Tensor> tensors = {tensor};
      c10d::AllreduceOptions options;
      options.reduceOp = ToC10d(op);
      options.timeout = ToChrono(timeout_);
      return backend_->allreduce(tensors, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) override {
    TITAN_RETURN_IF_ERROR(
        CheckPair("all_gather", input, output, input.numel() * size(), "size() × input"));
    return Start("all_gather", "_all_gather_base", false, {input}, {output}, [&] {
      at::Tensor flat_in = input.view({-1});
      at::Tensor flat_out = output.view({-1});
      c10d::AllgatherOptions options;
      options.timeout = ToChrono(timeout_);
      return backend_->_allgather_base(flat_out, flat_in, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> ReduceScatter(at::Tensor input, at::Tensor output,
                                                      ReduceOp op) override {
    TITAN_RETURN_IF_ERROR(
        CheckPair("reduce_scatter", output, input, output.numel() * size(), "size() × output"));
    return Start("reduce_scatter", "_reduce_scatter_base", false, {input}, {output}, [&] {
      at::Tensor flat_in = input.view({-1});
      at::Tensor flat_out = output.view({-1});
      c10d::ReduceScatterOptions options;
      options.reduceOp = ToC10d(op);
      options.timeout = ToChrono(timeout_);
      return backend_->_reduce_scatter_base(flat_out, flat_in, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Broadcast(at::Tensor tensor, int root) override {
    TITAN_RETURN_IF_ERROR(CheckTensor("broadcast", "tensor", tensor));
    TITAN_RETURN_IF_ERROR(CheckCollectivePeer(state(), "broadcast", "root", root, true));
    return Start("broadcast", "broadcast", false, {tensor}, {tensor}, [&] {
      std::vector<at::Tensor> tensors = {tensor};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      options.timeout = ToChrono(timeout_);
      return backend_->broadcast(tensors, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Send(at::Tensor tensor, int dst, int tag) override {
    TITAN_RETURN_IF_ERROR(CheckTensor("send", "tensor", tensor));
    TITAN_RETURN_IF_ERROR(CheckCollectivePeer(state(), "send", "dst", dst, false));
    return Start("send", absl::StrCat("send ", rank(), "->", dst), true, {tensor}, {tensor}, [&] {
      std::vector<at::Tensor> tensors = {tensor};
      return backend_->send(tensors, dst, tag);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Recv(at::Tensor tensor, int src, int tag) override {
    TITAN_RETURN_IF_ERROR(CheckTensor("recv", "tensor", tensor));
    TITAN_RETURN_IF_ERROR(CheckCollectivePeer(state(), "recv", "src", src, false));
    return Start("recv", absl::StrCat("recv ", rank(), "<-", src), true, {tensor}, {tensor}, [&] {
      std::vector<at::Tensor> tensors = {tensor};
      return backend_->recv(tensors, src, tag);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> BatchP2P(std::vector<P2POp> ops) override {
    if (ops.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch_p2p on group \"", name(), "\": no operations"));
    }
    // ProcessGroupNCCL runs a coalesced block as one NCCL group over the group's communicator
    // (where a member may also send to itself); Gloo cannot coalesce, and needs not: its sends
    // and receives are matched by tag.
    const bool grouped = backend_->supportsCoalescing();
    for (const P2POp& p2p : ops) {
      const char* op = p2p.send ? "send" : "recv";
      TITAN_RETURN_IF_ERROR(CheckTensor(op, "tensor", p2p.tensor));
      TITAN_RETURN_IF_ERROR(
          CheckCollectivePeer(state(), op, p2p.send ? "dst" : "src", p2p.peer, grouped));
    }
    return StartAll("batch_p2p", /*p2p=*/true, [&]() -> Issued {
      Issued issued;
      if (grouped) backend_->startCoalescing();
      try {
        for (P2POp& p2p : ops) {
          std::vector<at::Tensor> tensors = {p2p.tensor};
          c10::intrusive_ptr<c10d::Work> work = p2p.send
                                                    ? backend_->send(tensors, p2p.peer, p2p.tag)
                                                    : backend_->recv(tensors, p2p.peer, p2p.tag);
          if (!grouped) issued.works.push_back(std::move(work));
        }
      } catch (const std::exception&) {
        if (grouped) {
          try {
            (void)backend_->endCoalescing();
          } catch (const std::exception&) {
            // The first error is the one to report.
          }
        }
        throw;
      }
      if (grouped) {
        c10::intrusive_ptr<c10d::Work> work = backend_->endCoalescing();
        if (!work) throw std::runtime_error("c10d's endCoalescing returned no work");
        issued.works.push_back(std::move(work));
      }
      if (shared_->trace) {
        for (size_t i : TraceOrder(ops)) {
          const P2POp& p2p = ops[i];
          const std::string traced = p2p.send ? absl::StrCat("send ", rank(), "->", p2p.peer)
                                              : absl::StrCat("recv ", rank(), "<-", p2p.peer);
          issued.trace_ids.push_back(shared_->trace->Record(
              shared_->p2p_trace_group.get(), traced, true, {p2p.tensor}, {p2p.tensor},
              grouped ? issued.works.front() : issued.works[i], timeout_));
        }
      }
      return issued;
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> AllToAll(at::Tensor input, at::Tensor output) override {
    TITAN_RETURN_IF_ERROR(CheckPair("all_to_all", input, output, input.numel(), "input"));
    if (input.numel() % size() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("all_to_all on group \"", name(), "\": ", input.numel(),
                       " elements do not split into ", size(), " equal slices"));
    }
    return Start("all_to_all", "all_to_all", false, {input}, {output}, [&] {
      at::Tensor flat_in = input.view({-1});
      at::Tensor flat_out = output.view({-1});
      std::vector<int64_t> equal_splits;
      c10d::AllToAllOptions options;
      options.timeout = ToChrono(timeout_);
      return backend_->alltoall_base(flat_out, flat_in, equal_splits, equal_splits, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Barrier() override {
    return Start("barrier", "all_reduce_barrier", false, {}, {}, [&] {
      c10d::BarrierOptions options;
      options.timeout = ToChrono(timeout_);
      if (shared_->device.is_cuda()) options.device_ids = {shared_->device.index()};
      return backend_->barrier(options);
    });
  }

 private:
  const GroupState& state() const { return *shared_->state; }

  // The order a batch's transfers are recorded in: those from the lower group rank to the higher
  // first, then the others, each in issue order. The batch runs as one, so any order is true; this
  // one gives both ends of a pair the same sequence (rank 0: send 0->1, recv 0<-1; rank 1:
  // recv 1<-0, send 1->0), which fr_trace needs: it pairs a two-member group's point-to-point
  // entries in order, and would read two members that both send first as mismatched.
  std::vector<size_t> TraceOrder(const std::vector<P2POp>& ops) const {
    std::vector<size_t> order;
    for (const bool upward : {true, false}) {
      for (size_t i = 0; i < ops.size(); ++i) {
        const bool from_lower = ops[i].send ? ops[i].peer > rank() : ops[i].peer < rank();
        if (from_lower == upward) order.push_back(i);
      }
    }
    return order;
  }

  // What one operation started: c10d's handles, and the trace entries recorded for them.
  struct Issued {
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    std::vector<TraceId> trace_ids;
  };

  // Marks this member's arrival, runs `issue` (the c10d calls and their trace entries,
  // point-to-point ones if `p2p`) and wraps what it started; a throw becomes the group's failure,
  // naming who has not arrived.
  template <typename IssueAll>
  absl::StatusOr<std::unique_ptr<Work>> StartAll(const char* op, bool p2p, IssueAll issue) {
    const uint64_t seq = ++seq_;
    const absl::Time start = absl::Now();
    PhaseRange range("comm:", op, "");
    try {
      shared_->state->MarkArrived(seq);
      Issued issued = issue();
      return std::unique_ptr<Work>(new BackendWork(shared_, std::move(issued.works), op, seq,
                                                   std::move(issued.trace_ids),
                                                   shared_->TraceGroupOf(p2p), timeout_));
    } catch (const std::exception& e) {
      return shared_->state->Failure(op, seq, start, Reason(e));
    }
  }

  // One c10d call, recorded as `traced` (the analyzer's name).
  template <typename Issue>
  absl::StatusOr<std::unique_ptr<Work>> Start(const char* op, const std::string& traced, bool p2p,
                                              const std::vector<at::Tensor>& inputs,
                                              const std::vector<at::Tensor>& outputs, Issue issue) {
    return StartAll(op, p2p, [&] {
      Issued issued{{issue()}, {}};
      if (shared_->trace) {
        issued.trace_ids.push_back(shared_->trace->Record(shared_->TraceGroupOf(p2p), traced, p2p,
                                                          inputs, outputs, issued.works.front(),
                                                          timeout_));
      }
      return issued;
    });
  }

  absl::Status CheckTensor(const char* op, const char* what, const at::Tensor& tensor) const {
    TITAN_RETURN_IF_ERROR(CheckCollectiveTensor(state(), op, what, tensor, shared_->device.type(),
                                                backend_name_.c_str()));
    if (shared_->device.has_index() && tensor.device() != shared_->device) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, " on group \"", name(), "\": ", what, " is on ", tensor.device().str(),
                       ", the communicator on ", shared_->device.str()));
    }
    return absl::OkStatus();
  }

  absl::Status CheckPair(const char* op, const at::Tensor& small, const at::Tensor& big,
                         int64_t expected, const char* expected_text) const {
    TITAN_RETURN_IF_ERROR(CheckCollectivePair(state(), op, small, big, expected, expected_text,
                                              shared_->device.type(), backend_name_.c_str()));
    TITAN_RETURN_IF_ERROR(CheckTensor(op, "input", small));
    return CheckTensor(op, "output", big);
  }

  const std::shared_ptr<const Shared> shared_;
  const c10::intrusive_ptr<c10d::Backend> backend_;
  const std::string backend_name_;
  absl::Duration timeout_;
  uint64_t seq_ = 0;
};

}  // namespace

absl::StatusOr<int> GroupRankOf(const std::string& name, const std::vector<int>& global_ranks,
                                int job_rank) {
  const auto self = std::find(global_ranks.begin(), global_ranks.end(), job_rank);
  if (self == global_ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat("group \"", name, "\" (job ranks ",
                                                   absl::StrJoin(global_ranks, ","),
                                                   ") does not include this rank ", job_rank));
  }
  return static_cast<int>(self - global_ranks.begin());
}

c10::intrusive_ptr<c10d::Backend> BackendOf(const Communicator& communicator) {
  const auto* wrapped = dynamic_cast<const BackendCommunicator*>(&communicator);
  return wrapped != nullptr ? wrapped->backend() : c10::intrusive_ptr<c10d::Backend>();
}

std::unique_ptr<Communicator> MakeBackendCommunicator(std::shared_ptr<GroupState> group,
                                                      c10::intrusive_ptr<c10d::Backend> backend,
                                                      const std::string& backend_name,
                                                      c10::Device device, absl::Duration timeout,
                                                      std::shared_ptr<CommTrace> trace) {
  std::shared_ptr<TraceGroup> trace_group;
  std::shared_ptr<TraceGroup> p2p_trace_group;
  if (trace) {
    // Gloo and NCCL communicators of one mesh group are separate groups in the dump.
    const std::string name = absl::StrCat(backend_name, ":", group->name());
    trace_group = trace->AddGroup(name, group->global_ranks(), backend_name);
    p2p_trace_group =
        trace->AddGroup(absl::StrCat(name, ":p2p"), group->global_ranks(), backend_name);
  }
  auto shared =
      std::make_shared<Shared>(Shared{std::move(group), std::move(trace), std::move(trace_group),
                                      std::move(p2p_trace_group), device});
  return std::make_unique<BackendCommunicator>(std::move(shared), std::move(backend), backend_name,
                                               timeout);
}

}  // namespace titan
