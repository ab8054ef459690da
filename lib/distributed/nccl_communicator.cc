#include "lib/distributed/nccl_communicator.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/distributed/group_state.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

absl::Status NcclError(ncclResult_t result, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(result)));
}

absl::Status CudaError(cudaError_t error, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(error)));
}

absl::StatusOr<ncclDataType_t> NcclType(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return ncclFloat32;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kDouble:
      return ncclFloat64;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
    case at::kBool:
      return ncclUint8;
    case at::kChar:
      return ncclInt8;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", c10::toString(type), " has no NCCL equivalent"));
  }
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

// Non-blocking communicators (so that a dead peer can never hang the host) report completion of
// host-side calls through ncclCommGetAsyncError; this waits for it, up to `deadline`.
absl::Status AwaitNcclCall(ncclComm_t comm, ncclResult_t result, absl::Time deadline,
                           absl::string_view what) {
  while (result == ncclInProgress) {
    if (absl::Now() > deadline)
      return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    ncclCommGetAsyncError(comm, &result);
  }
  return result == ncclSuccess ? absl::OkStatus() : NcclError(result, what);
}

// What a group's Work handles need of it: the NCCL communicator (aborted on a timeout) and state.
struct NcclGroup {
  NcclGroup(std::shared_ptr<GroupState> state, int device)
      : state(std::move(state)),
        device(device),
        stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device)) {}
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  ~NcclGroup() {
    if (comm != nullptr && !aborted) ncclCommDestroy(comm);
  }

  const std::shared_ptr<GroupState> state;
  const int device;
  const c10::cuda::CUDAStream stream;
  ncclComm_t comm = nullptr;
  bool aborted = false;
};

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclGroup> group, cudaEvent_t done, const char* op, uint64_t seq,
           absl::Duration timeout)
      : group_(std::move(group)),
        done_(done),
        op_(op),
        seq_(seq),
        timeout_(timeout),
        start_(absl::Now()) {}
  ~NcclWork() override { cudaEventDestroy(done_); }

  absl::Status Wait() override {
    if (waited_) return status_;
    waited_ = true;
    const absl::Time deadline = start_ + timeout_;
    while (true) {
      const cudaError_t query = cudaEventQuery(done_);
      if (query == cudaSuccess) break;
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(group_->comm, &async_error);
      if (query != cudaErrorNotReady ||
          (async_error != ncclSuccess && async_error != ncclInProgress)) {
        Abort();
        status_ =
            group_->state->Failure(op_, seq_, start_,
                                   query != cudaErrorNotReady ? cudaGetErrorString(query)
                                                              : ncclGetErrorString(async_error));
        return status_;
      }
      if (absl::Now() > deadline) {
        Abort();
        status_ = group_->state->Failure(op_, seq_, start_, "timed out; NCCL communicator aborted");
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    // Later work on the caller's stream reads the result only after NCCL wrote it.
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(group_->device);
    const cudaError_t ordered = cudaStreamWaitEvent(caller.stream(), done_, 0);
    if (ordered != cudaSuccess) status_ = CudaError(ordered, absl::StrCat(op_, ": stream wait"));
    return status_;
  }

  bool IsCompleted() override { return cudaEventQuery(done_) != cudaErrorNotReady; }

 private:
  void Abort() {
    if (!group_->aborted) {
      group_->aborted = true;
      ncclCommAbort(group_->comm);
    }
  }

  const std::shared_ptr<NcclGroup> group_;
  const cudaEvent_t done_;
  const char* const op_;
  const uint64_t seq_;
  const absl::Duration timeout_;
  const absl::Time start_;
  bool waited_ = false;
  absl::Status status_;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclGroup> group, absl::Duration timeout)
      : group_(std::move(group)), timeout_(timeout) {}

  const std::string& name() const override { return group_->state->name(); }
  int rank() const override { return group_->state->rank(); }
  int size() const override { return group_->state->size(); }
  const std::vector<int>& global_ranks() const override { return group_->state->global_ranks(); }
  absl::Duration timeout() const override { return timeout_; }
  void set_timeout(absl::Duration timeout) override { timeout_ = timeout; }

  absl::StatusOr<std::unique_ptr<Work>> AllReduce(at::Tensor tensor, ReduceOp op) override {
    TITAN_RETURN_IF_ERROR(CheckTensor("all_reduce", "tensor", tensor));
    return Start("all_reduce", {tensor}, [&](ncclDataType_t type, cudaStream_t stream) {
      return ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), type, NcclOp(op),
                           group_->comm, stream);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> AllGather(at::Tensor input, at::Tensor output) override {
    TITAN_RETURN_IF_ERROR(
        CheckPair("all_gather", input, output, input.numel() * size(), "size() × input"));
    return Start("all_gather", {input, output}, [&](ncclDataType_t type, cudaStream_t stream) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), type, group_->comm,
                           stream);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> ReduceScatter(at::Tensor input, at::Tensor output,
                                                      ReduceOp op) override {
    TITAN_RETURN_IF_ERROR(
        CheckPair("reduce_scatter", output, input, output.numel() * size(), "size() × output"));
    return Start("reduce_scatter", {input, output}, [&](ncclDataType_t type, cudaStream_t stream) {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), type,
                               NcclOp(op), group_->comm, stream);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Broadcast(at::Tensor tensor, int root) override {
    TITAN_RETURN_IF_ERROR(CheckTensor("broadcast", "tensor", tensor));
    TITAN_RETURN_IF_ERROR(CheckCollectivePeer(*group_->state, "broadcast", "root", root, true));
    return Start("broadcast", {tensor}, [&](ncclDataType_t type, cudaStream_t stream) {
      return ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), type, root,
                           group_->comm, stream);
    });
  }

  // NCCL has no tags: sends and receives between two members match in the order they are issued.
  absl::StatusOr<std::unique_ptr<Work>> Send(at::Tensor tensor, int dst, int /*tag*/) override {
    TITAN_RETURN_IF_ERROR(CheckTensor("send", "tensor", tensor));
    TITAN_RETURN_IF_ERROR(CheckCollectivePeer(*group_->state, "send", "dst", dst, false));
    return Start("send", {tensor}, [&](ncclDataType_t type, cudaStream_t stream) {
      return ncclSend(tensor.data_ptr(), tensor.numel(), type, dst, group_->comm, stream);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Recv(at::Tensor tensor, int src, int /*tag*/) override {
    TITAN_RETURN_IF_ERROR(CheckTensor("recv", "tensor", tensor));
    TITAN_RETURN_IF_ERROR(CheckCollectivePeer(*group_->state, "recv", "src", src, false));
    return Start("recv", {tensor}, [&](ncclDataType_t type, cudaStream_t stream) {
      return ncclRecv(tensor.data_ptr(), tensor.numel(), type, src, group_->comm, stream);
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> AllToAll(at::Tensor input, at::Tensor output) override {
    TITAN_RETURN_IF_ERROR(CheckPair("all_to_all", input, output, input.numel(), "input"));
    if (input.numel() % size() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("all_to_all on group \"", name(), "\": ", input.numel(),
                       " elements do not split into ", size(), " equal slices"));
    }
    return Start("all_to_all", {input, output}, [&](ncclDataType_t type, cudaStream_t stream) {
      const int64_t count = input.numel() / size();
      const int64_t bytes = count * input.element_size();
      char* in = static_cast<char*>(input.data_ptr());
      char* out = static_cast<char*>(output.data_ptr());
      ncclGroupStart();
      for (int peer = 0; peer < size(); ++peer) {
        ncclSend(in + peer * bytes, count, type, peer, group_->comm, stream);
        ncclRecv(out + peer * bytes, count, type, peer, group_->comm, stream);
      }
      return ncclGroupEnd();
    });
  }

  absl::StatusOr<std::unique_ptr<Work>> Barrier() override {
    // An all-reduce of one element: NCCL has no barrier of its own.
    at::Tensor token = at::zeros({1}, at::TensorOptions().device(at::kCUDA, group_->device));
    return AllReduce(token, ReduceOp::kSum);
  }

 private:
  // Orders the NCCL call after the caller's queued work, issues it on the group's stream, keeps
  // the tensors' memory from being reused until the stream is past it, and returns its handle.
  template <typename Issue>
  absl::StatusOr<std::unique_ptr<Work>> Start(const char* op, std::vector<at::Tensor> tensors,
                                              Issue issue) {
    const uint64_t seq = ++seq_;
    const absl::Time start = absl::Now();
    if (group_->aborted) {
      return group_->state->Failure(op, seq, start, "the NCCL communicator was aborted earlier");
    }
    absl::StatusOr<ncclDataType_t> type = NcclType(tensors[0].scalar_type());
    if (!type.ok()) return type.status();
    const c10::cuda::CUDAGuard guard(group_->device);
    try {
      group_->state->MarkArrived(seq);
    } catch (const std::exception& e) {
      return group_->state->Failure(op, seq, start, Reason(e));
    }
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(group_->device);
    cudaEvent_t ready = nullptr;
    cudaEvent_t done = nullptr;
    cudaError_t error = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cudaEventRecord(ready, caller.stream());
    if (error == cudaSuccess) error = cudaStreamWaitEvent(group_->stream.stream(), ready, 0);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (error != cudaSuccess) return CudaError(error, absl::StrCat(op, ": ordering after compute"));
    const absl::Status issued =
        AwaitNcclCall(group_->comm, issue(*type, group_->stream.stream()), start + timeout_, op);
    if (!issued.ok()) return group_->state->Failure(op, seq, start, issued.message());
    for (const at::Tensor& tensor : tensors) {
      c10::cuda::CUDACachingAllocator::recordStream(tensor.storage().data_ptr(), group_->stream);
    }
    error = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cudaEventRecord(done, group_->stream.stream());
    if (error != cudaSuccess) return CudaError(error, absl::StrCat(op, ": completion event"));
    return std::unique_ptr<Work>(new NcclWork(group_, done, op, seq, timeout_));
  }

  absl::Status CheckTensor(const char* op, const char* what, const at::Tensor& tensor) const {
    TITAN_RETURN_IF_ERROR(
        CheckCollectiveTensor(*group_->state, op, what, tensor, c10::DeviceType::CUDA, "nccl"));
    if (tensor.device().index() != group_->device) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, " on group \"", name(), "\": ", what, " is on ", tensor.device().str(),
                       ", the communicator on cuda:", group_->device));
    }
    return absl::OkStatus();
  }

  absl::Status CheckPair(const char* op, const at::Tensor& small, const at::Tensor& big,
                         int64_t expected, const char* expected_text) const {
    TITAN_RETURN_IF_ERROR(CheckCollectivePair(*group_->state, op, small, big, expected,
                                              expected_text, c10::DeviceType::CUDA, "nccl"));
    TITAN_RETURN_IF_ERROR(CheckTensor(op, "input", small));
    return CheckTensor(op, "output", big);
  }

  const std::shared_ptr<NcclGroup> group_;
  absl::Duration timeout_;
  uint64_t seq_ = 0;
};

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
    int device, absl::Duration timeout) {
  const int job_rank = rendezvous->env().rank;
  const auto self = std::find(global_ranks.begin(), global_ranks.end(), job_rank);
  if (self == global_ranks.end()) {
    return absl::InvalidArgumentError(absl::StrCat("group \"", name, "\" (job ranks ",
                                                   absl::StrJoin(global_ranks, ","),
                                                   ") does not include this rank ", job_rank));
  }
  const int rank = static_cast<int>(self - global_ranks.begin());
  const int size = static_cast<int>(global_ranks.size());
  const c10::intrusive_ptr<c10d::Store>& store = rendezvous->store();
  const c10::cuda::CUDAGuard guard(device);
  auto group = std::make_shared<NcclGroup>(
      std::make_shared<GroupState>(name, global_ranks, rank,
                                   c10::make_intrusive<c10d::PrefixStore>(
                                       absl::StrCat("titan/nccl-progress/", name), store)),
      device);
  const absl::Time start = absl::Now();
  ncclUniqueId id;
  const std::string id_key = absl::StrCat("titan/nccl-id/", name);
  try {
    group->state->MarkArrived(0);  // Operation #0 is joining the group.
    if (rank == 0) {
      const ncclResult_t made = ncclGetUniqueId(&id);
      if (made != ncclSuccess) return NcclError(made, "ncclGetUniqueId");
      const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
      store->set(id_key, std::vector<uint8_t>(bytes, bytes + sizeof(id)));
    } else {
      const std::vector<uint8_t> bytes = store->get(id_key);  // Waits up to the store's timeout.
      if (bytes.size() != sizeof(id)) {
        return absl::DataLossError(
            absl::StrCat(id_key, ": ", bytes.size(), " bytes, expected ", sizeof(id)));
      }
      std::copy(bytes.begin(), bytes.end(), reinterpret_cast<uint8_t*>(&id));
    }
  } catch (const std::exception& e) {
    return group->state->Failure("create_group", 0, start, Reason(e));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t init = ncclCommInitRankConfig(&group->comm, size, id, rank, &config);
  const absl::Status joined =
      AwaitNcclCall(group->comm, init, start + timeout, "ncclCommInitRankConfig");
  if (!joined.ok()) {
    if (group->comm != nullptr) {
      ncclCommAbort(group->comm);
      group->aborted = true;
    }
    return group->state->Failure("create_group", 0, start, joined.message());
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(group), timeout));
}

std::unique_ptr<Communicator> CreateDeviceDispatchingCommunicator(
    std::unique_ptr<Communicator> cpu, std::unique_ptr<Communicator> gpu) {
  return std::make_unique<DeviceDispatchingCommunicator>(std::move(cpu), std::move(gpu));
}

}  // namespace titan
