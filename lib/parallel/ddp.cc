#include "lib/parallel/ddp.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/util/status_context.h"

namespace titan {

// Runs after a parameter's gradient has been accumulated (PyTorch's post-accumulate-grad hook).
class DdpGradientReducer::ReadyHook : public torch::autograd::PostAccumulateGradHook {
 public:
  ReadyHook(DdpGradientReducer* reducer, int param) : reducer_(reducer), param_(param) {}
  void operator()(const torch::autograd::Variable& /*param*/) override {
    reducer_->MarkReady(param_);
  }

 private:
  DdpGradientReducer* reducer_;
  int param_;
};

absl::StatusOr<std::unique_ptr<DdpGradientReducer>> DdpGradientReducer::Create(
    std::vector<at::Tensor> params, Communicator* comm, int64_t bucket_cap_bytes) {
  if (params.empty()) return absl::InvalidArgumentError("DDP without parameters");
  for (const at::Tensor& p : params) {
    if (!p.is_leaf() || !p.requires_grad() || p.scalar_type() != params[0].scalar_type()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DDP parameters must be leaves that require grad, all ",
                       c10::toString(params[0].scalar_type()), "; got ", p.toString()));
    }
  }
  std::unique_ptr<DdpGradientReducer> reducer(new DdpGradientReducer(std::move(params), comm));
  const int n = static_cast<int>(reducer->params_.size());
  reducer->bucket_of_.resize(n);
  int64_t bucket_bytes = 0;
  for (int i = n - 1; i >= 0; --i) {
    const at::Tensor& p = reducer->params_[i];
    if (reducer->buckets_.empty() || bucket_bytes >= bucket_cap_bytes) {
      reducer->buckets_.emplace_back();
      bucket_bytes = 0;
    }
    reducer->buckets_.back().params.push_back(i);
    reducer->bucket_of_[i] = static_cast<int>(reducer->buckets_.size()) - 1;
    bucket_bytes += p.numel() * p.element_size();
  }
  for (Bucket& bucket : reducer->buckets_) {
    int64_t numel = 0;
    for (int i : bucket.params) numel += reducer->params_[i].numel();
    bucket.buffer = at::empty({numel}, reducer->params_[bucket.params[0]].options());
    bucket.pending = static_cast<int>(bucket.params.size());
  }
  for (int i = 0; i < n; ++i) {
    torch::autograd::impl::set_post_acc_grad_hooks(reducer->params_[i],
                                                   std::make_unique<ReadyHook>(reducer.get(), i));
  }
  return reducer;
}

DdpGradientReducer::~DdpGradientReducer() {
  for (const at::Tensor& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void DdpGradientReducer::MarkReady(int param) {
  if (!sync_) return;
  --buckets_[bucket_of_[param]].pending;
  // Buckets start in one order on every rank, whatever order their gradients arrive in.
  while (next_launch_ < num_buckets() && buckets_[next_launch_].pending == 0) {
    Launch(buckets_[next_launch_++]);
  }
}

void DdpGradientReducer::Launch(Bucket& bucket) {
  c10::NoGradGuard no_grad;
  int64_t offset = 0;
  for (int i : bucket.params) {
    const at::Tensor& p = params_[i];
    at::Tensor slice = bucket.buffer.narrow(0, offset, p.numel());
    if (p.grad().defined()) {
      slice.copy_(p.grad().reshape(-1));
    } else {
      slice.zero_();
    }
    offset += p.numel();
  }
  absl::StatusOr<std::unique_ptr<Work>> work = comm_->AllReduce(bucket.buffer, ReduceOp::kSum);
  if (work.ok()) {
    bucket.work = *std::move(work);
  } else if (error_.ok()) {
    error_ = work.status();
  }
}

absl::Status DdpGradientReducer::Finish() {
  while (next_launch_ < num_buckets()) Launch(buckets_[next_launch_++]);
  absl::Status status = error_;
  c10::NoGradGuard no_grad;
  for (Bucket& bucket : buckets_) {
    if (bucket.work != nullptr) {
      absl::Status waited = bucket.work->Wait();
      if (status.ok() && !waited.ok()) status = waited;
      bucket.work.reset();
    }
    bucket.pending = static_cast<int>(bucket.params.size());
    if (!status.ok()) continue;
    bucket.buffer.div_(static_cast<double>(comm_->size()));
    int64_t offset = 0;
    for (int i : bucket.params) {
      at::Tensor& p = params_[i];
      at::Tensor average = bucket.buffer.narrow(0, offset, p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        p.mutable_grad().copy_(average);
      } else {
        p.mutable_grad() = average.clone();
      }
      offset += p.numel();
    }
  }
  next_launch_ = 0;
  error_ = absl::OkStatus();
  return WithContext(status, "DDP gradient all-reduce");
}

}  // namespace titan
