#ifndef TITAN_LIB_PARALLEL_COLLECTIVES_H_
#define TITAN_LIB_PARALLEL_COLLECTIVES_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "lib/distributed/communicator.h"

namespace titan {

// Collectives as differentiable ops over the members of `comm` (tensor parallelism's region
// boundaries, the vocab-parallel loss): autograd runs each one's adjoint in backward. They run
// inside autograd, so a failed collective throws c10::Error. `comm` must outlive the graph.

// Megatron's f: the identity forward; backward sums the gradient over the members (each member's
// region computed a part of what the input fed).
at::Tensor CopyToRegion(const at::Tensor& x, Communicator* comm);
// Megatron's g: sums the members' partial results; backward passes the gradient through (every
// member continues identically from the sum).
at::Tensor SumOverRegion(const at::Tensor& x, Communicator* comm);
// Concatenates the members' tensors along `dim` (member order); backward reduce-scatters: each
// member gets the sum of the gradients of its slice (sequence parallelism's entry).
at::Tensor AllGatherAlongDim(const at::Tensor& x, int64_t dim, Communicator* comm);
// Sums the members' tensors and keeps this member's slice of `dim` (equal slices, member order);
// backward all-gathers (sequence parallelism's exit).
at::Tensor ReduceScatterAlongDim(const at::Tensor& x, int64_t dim, Communicator* comm);
// Concatenates the members' tensors along `dim`; backward keeps this member's slice of the gradient
// (every member computes the same thing from the whole: logits gathered over vocabulary shards
// before a loss).
at::Tensor GatherForReplicatedUse(const at::Tensor& x, int64_t dim, Communicator* comm);

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_COLLECTIVES_H_
