// Gloo headers and ABI: the torch wheel ships c10d's ProcessGroupGloo.hpp but not the gloo headers
// it includes, so this file compiles against Debian's libgloo-dev headers (an older gloo) and links
// no gloo library: every gloo function that runs is the copy inside libtorch_cpu.so. That is sound
// because this file (1) calls only exported, out-of-line c10d functions (ProcessGroupGloo's
// constructor, Options::Options, createDevice*) and the virtuals of c10d::Backend / c10d::Work,
// whose vtables live in libtorch; (2) allocates ProcessGroupGloo and its Options, whose members
// hold gloo objects only through std::shared_ptr (or vectors of them), so their sizes and layouts
// do not depend on which gloo headers were read; (3) never runs inline code that touches a gloo
// object (ProcessGroupGloo::setTimeout, GlooStore, gloo::Context members are left alone).
// //tests/distributed:gloo_abi_test checks that the linked binary neither defines nor references a
// gloo:: symbol of its own.
#include "lib/distributed/gloo_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "lib/distributed/group_state.h"

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

class GlooWork : public Work {
 public:
  GlooWork(std::shared_ptr<const GroupState> group, c10::intrusive_ptr<c10d::Work> work,
           const char* op, uint64_t seq, absl::Duration timeout)
      : group_(std::move(group)),
        work_(std::move(work)),
        op_(op),
        seq_(seq),
        timeout_(timeout),
        start_(absl::Now()) {}

  absl::Status Wait() override {
    if (waited_) return status_;
    waited_ = true;
    try {
      work_->wait(ToChrono(timeout_));
    } catch (const std::exception& e) {
      status_ = group_->Failure(op_, seq_, start_, Reason(e));
    }
    return status_;
  }

  bool IsCompleted() override { return work_->isCompleted(); }

 private:
  const std::shared_ptr<const GroupState> group_;
  const c10::intrusive_ptr<c10d::Work> work_;
  const char* const op_;
  const uint64_t seq_;
  const absl::Duration timeout_;
  const absl::Time start_;
  bool waited_ = false;
  absl::Status status_;
};

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<GroupState> group, c10::intrusive_ptr<c10d::Backend> backend,
                   absl::Duration timeout)
      : group_(std::move(group)), backend_(std::move(backend)), timeout_(timeout) {}

  const std::string& name() const override { return group_->name(); }
  int rank() const override { return group_->rank(); }
  int size() const override { return static_cast<int>(group_->global_ranks().size()); }
  const std::vector<int>& global_ranks() const override { return group_->global_ranks(); }
  absl::Duration timeout() const override { return timeout_; }
  void set_timeout(absl::Duration timeout) override { timeout_ = timeout; }

  absl::StatusOr<std::unique_ptr<Work>> AllReduce(at::Tensor tensor, ReduceOp op) override {
    if (absl::Status s = CheckTensor("all_reduce", "tensor", tensor); !s.ok()) return s;
    return Start("all_reduce", [&] {
      std::vector<at::Tensor> tensors = {tensor};
      c10d::AllreduceOptions options;
      options.reduceOp = ToC10d(op);
      options.timeout = ToChrono(timeout_);
      return backend_->allreduce(tensors, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) override {
    if (absl::Status s = CheckPair("all_gather", input, output, input.numel() * size(), "size() × input");
        !s.ok()) {
      return s;
    }
    return Start("all_gather", [&] {
      at::Tensor flat_in = input.view({-1});
      at::Tensor flat_out = output.view({-1});
      c10d::AllgatherOptions options;
      options.timeout = ToChrono(timeout_);
      return backend_->_allgather_base(flat_out, flat_in, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> ReduceScatter(at::Tensor input, at::Tensor output,
                                                      ReduceOp op) override {
    if (absl::Status s = CheckPair("reduce_scatter", output, input, output.numel() * size(),
                                   "size() × output");
        !s.ok()) {
      return s;
    }
    return Start("reduce_scatter", [&] {
      at::Tensor flat_in = input.view({-1});
      at::Tensor flat_out = output.view({-1});
      c10d::ReduceScatterOptions options;
      options.reduceOp = ToC10d(op);
      options.timeout = ToChrono(timeout_);
      return backend_->_reduce_scatter_base(flat_out, flat_in, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Broadcast(at::Tensor tensor, int root) override {
    if (absl::Status s = CheckTensor("broadcast", "tensor", tensor); !s.ok()) return s;
    if (absl::Status s = CheckPeer("broadcast", "root", root, /*self_ok=*/true); !s.ok()) return s;
    return Start("broadcast", [&] {
      std::vector<at::Tensor> tensors = {tensor};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      options.timeout = ToChrono(timeout_);
      return backend_->broadcast(tensors, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Send(at::Tensor tensor, int dst, int tag) override {
    if (absl::Status s = CheckTensor("send", "tensor", tensor); !s.ok()) return s;
    if (absl::Status s = CheckPeer("send", "dst", dst, /*self_ok=*/false); !s.ok()) return s;
    return Start("send", [&] {
      std::vector<at::Tensor> tensors = {tensor};
      return backend_->send(tensors, dst, tag);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Recv(at::Tensor tensor, int src, int tag) override {
    if (absl::Status s = CheckTensor("recv", "tensor", tensor); !s.ok()) return s;
    if (absl::Status s = CheckPeer("recv", "src", src, /*self_ok=*/false); !s.ok()) return s;
    return Start("recv", [&] {
      std::vector<at::Tensor> tensors = {tensor};
      return backend_->recv(tensors, src, tag);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> AllToAll(at::Tensor input, at::Tensor output) override {
    if (absl::Status s = CheckPair("all_to_all", input, output, input.numel(), "input");
        !s.ok()) {
      return s;
    }
    if (input.numel() % size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "all_to_all on group \"", name(), "\": ", input.numel(),
          " elements do not split into ", size(), " equal slices"));
    }
    return Start("all_to_all", [&] {
      at::Tensor flat_in = input.view({-1});
      at::Tensor flat_out = output.view({-1});
      std::vector<int64_t> equal_splits;
      c10d::AllToAllOptions options;
      options.timeout = ToChrono(timeout_);
      return backend_->alltoall_base(flat_out, flat_in, equal_splits, equal_splits, options);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Barrier() override {
    return Start("barrier", [&] {
      c10d::BarrierOptions options;
      options.timeout = ToChrono(timeout_);
      return backend_->barrier(options);
    });
  }

 private:
  // Marks this member's arrival, issues the c10d call and wraps its handle.
  template <typename Issue>
  absl::StatusOr<std::unique_ptr<Work>> Start(const char* op, Issue issue) {
    const uint64_t seq = ++seq_;
    const absl::Time start = absl::Now();
    try {
      group_->MarkArrived(seq);
      c10::intrusive_ptr<c10d::Work> work = issue();
      return std::unique_ptr<Work>(new GlooWork(group_, std::move(work), op, seq, timeout_));
    } catch (const std::exception& e) {
      return group_->Failure(op, seq, start, Reason(e));
    }
  }

  absl::Status CheckTensor(const char* op, const char* what, const at::Tensor& tensor) const {
    return CheckCollectiveTensor(*group_, op, what, tensor, c10::DeviceType::CPU, "gloo");
  }
  absl::Status CheckPair(const char* op, const at::Tensor& small, const at::Tensor& big,
                         int64_t expected, const char* expected_text) const {
    return CheckCollectivePair(*group_, op, small, big, expected, expected_text,
                               c10::DeviceType::CPU, "gloo");
  }
  absl::Status CheckPeer(const char* op, const char* what, int peer, bool self_ok) const {
    return CheckCollectivePeer(*group_, op, what, peer, self_ok);
  }

  const std::shared_ptr<GroupState> group_;
  const c10::intrusive_ptr<c10d::Backend> backend_;
  absl::Duration timeout_;
  uint64_t seq_ = 0;
};

// Which local address peers reach this process on: GLOO_SOCKET_IFNAME (as in PyTorch) names an
// interface; a loopback master means a one-host job; otherwise this host's name must resolve.
std::shared_ptr<::gloo::transport::Device> CreateDevice(const DistributedEnv& env) {
  if (const char* interfaces = std::getenv("GLOO_SOCKET_IFNAME")) {
    const std::vector<std::string> names = absl::StrSplit(interfaces, ',');
    return c10d::ProcessGroupGloo::createDeviceForInterface(names.front());
  }
  if (env.master_addr == "localhost" || absl::StartsWith(env.master_addr, "127.")) {
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    std::shared_ptr<Rendezvous> rendezvous, const std::string& name, std::vector<int> global_ranks,
    absl::Duration timeout) {
  const DistributedEnv& env = rendezvous->env();
  const auto self = std::find(global_ranks.begin(), global_ranks.end(), env.rank);
  if (self == global_ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat("group \"", name, "\" (job ranks ",
                                                   absl::StrJoin(global_ranks, ","),
                                                   ") does not include this rank ", env.rank));
  }
  const int rank = static_cast<int>(self - global_ranks.begin());
  const int size = static_cast<int>(global_ranks.size());
  const c10::intrusive_ptr<c10d::Store>& store = rendezvous->store();
  auto group = std::make_shared<GroupState>(
      name, global_ranks, rank,
      c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("titan/progress/", name), store));
  const absl::Time start = absl::Now();
  try {
    // Operation #0 is joining the group.
    group->MarkArrived(0);
    c10::intrusive_ptr<c10d::ProcessGroupGloo::Options> options =
        c10d::ProcessGroupGloo::Options::create(ToChrono(timeout));
    options->devices.push_back(CreateDevice(env));
    c10::intrusive_ptr<c10d::Backend> backend = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>(absl::StrCat("titan/gloo/", name), store), rank,
        size, options);
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(std::move(group), std::move(backend), timeout));
  } catch (const std::exception& e) {
    // Members that never joined have no progress key at all.
    return group->Failure("create_group", 0, start, Reason(e));
  }
}

}  // namespace titan
