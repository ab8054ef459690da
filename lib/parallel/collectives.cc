#include "lib/parallel/collectives.h"

#include <c10/core/GradMode.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void Check(const absl::Status& status, const char* what, const Communicator& comm) {
  TORCH_CHECK(status.ok(), what, " on group ", comm.name(), ": ", status.ToString());
}

// The communicator outlives every graph built with it; a plain address needs no class registration.
void Save(AutogradContext* ctx, Communicator* comm, int64_t dim = 0) {
  ctx->saved_data["comm"] = reinterpret_cast<int64_t>(comm);
  ctx->saved_data["dim"] = dim;
}
Communicator* SavedComm(AutogradContext* ctx) {
  return reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
}
int64_t SavedDim(AutogradContext* ctx) { return ctx->saved_data["dim"].toInt(); }

at::Tensor Summed(const at::Tensor& x, Communicator* comm) {
  c10::NoGradGuard no_grad;
  at::Tensor sum = x.contiguous().clone();
  Check(Await(comm->AllReduce(sum, ReduceOp::kSum)), "all-reduce", *comm);
  return sum;
}

at::Tensor Gathered(const at::Tensor& x, int64_t dim, Communicator* comm) {
  c10::NoGradGuard no_grad;
  const at::Tensor input = x.contiguous();
  std::vector<int64_t> shape = input.sizes().vec();
  shape.insert(shape.begin(), comm->size());
  at::Tensor gathered = at::empty(shape, input.options());
  Check(Await(comm->AllGather(input, gathered)), "all-gather", *comm);
  // [members, ..., n, ...] -> [..., members * n, ...]: member r's slice comes r-th.
  return gathered.movedim(0, dim).flatten(dim, dim + 1);
}

at::Tensor Scattered(const at::Tensor& x, int64_t dim, Communicator* comm) {
  c10::NoGradGuard no_grad;
  const int64_t members = comm->size();
  TORCH_CHECK(x.size(dim) % members == 0, "reduce-scatter of ", x.size(dim), " along dim ", dim,
              " over ", members, " members");
  const at::Tensor input =
      x.unflatten(dim, {members, x.size(dim) / members}).movedim(dim, 0).contiguous();
  std::vector<int64_t> shape = x.sizes().vec();
  shape[dim] /= members;
  at::Tensor output = at::empty(shape, x.options());
  Check(Await(comm->ReduceScatter(input, output, ReduceOp::kSum)), "reduce-scatter", *comm);
  return output;
}

at::Tensor OwnSlice(const at::Tensor& x, int64_t dim, Communicator* comm) {
  const int64_t n = x.size(dim) / comm->size();
  return x.narrow(dim, comm->rank() * n, n).contiguous();
}

struct CopyToRegionFn : public torch::autograd::Function<CopyToRegionFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm) {
    Save(ctx, comm);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Summed(grads[0], SavedComm(ctx)), at::Tensor()};
  }
};

struct SumOverRegionFn : public torch::autograd::Function<SumOverRegionFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* comm) {
    return Summed(x, comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

struct AllGatherFn : public torch::autograd::Function<AllGatherFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim,
                            Communicator* comm) {
    Save(ctx, comm, dim);
    return Gathered(x, dim, comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Scattered(grads[0], SavedDim(ctx), SavedComm(ctx)), at::Tensor(), at::Tensor()};
  }
};

struct ReduceScatterFn : public torch::autograd::Function<ReduceScatterFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim,
                            Communicator* comm) {
    Save(ctx, comm, dim);
    return Scattered(x, dim, comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Gathered(grads[0], SavedDim(ctx), SavedComm(ctx)), at::Tensor(), at::Tensor()};
  }
};

struct GatherForReplicatedUseFn : public torch::autograd::Function<GatherForReplicatedUseFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t dim,
                            Communicator* comm) {
    Save(ctx, comm, dim);
    return Gathered(x, dim, comm);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {OwnSlice(grads[0], SavedDim(ctx), SavedComm(ctx)), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CopyToRegion(const at::Tensor& x, Communicator* comm) {
  return CopyToRegionFn::apply(x, comm);
}

at::Tensor SumOverRegion(const at::Tensor& x, Communicator* comm) {
  return SumOverRegionFn::apply(x, comm);
}

at::Tensor AllGatherAlongDim(const at::Tensor& x, int64_t dim, Communicator* comm) {
  return AllGatherFn::apply(x, c10::maybe_wrap_dim(dim, x.dim()), comm);
}

at::Tensor ReduceScatterAlongDim(const at::Tensor& x, int64_t dim, Communicator* comm) {
  return ReduceScatterFn::apply(x, c10::maybe_wrap_dim(dim, x.dim()), comm);
}

at::Tensor GatherForReplicatedUse(const at::Tensor& x, int64_t dim, Communicator* comm) {
  return GatherForReplicatedUseFn::apply(x, c10::maybe_wrap_dim(dim, x.dim()), comm);
}

}  // namespace titan
