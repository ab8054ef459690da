#ifndef TITAN_LIB_PARALLEL_SHARDED_STATE_H_
#define TITAN_LIB_PARALLEL_SHARDED_STATE_H_

#include <ATen/ATen.h>

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/safetensors.h"

namespace titan {

// How the tensors a rank holds (parameters, or optimizer state named "<param>.<state>") relate to
// the whole model's, for checkpoints: data and tensor parallelism shard them, pipeline parallelism
// spreads them over stages.
class ShardedState {
 public:
  virtual ~ShardedState() = default;
  // Takes one whole tensor of a GatherFull; what it does not keep is freed before the next.
  using WholeTensorSink =
      std::function<absl::Status(const std::string& name, const at::Tensor& whole)>;
  // The whole tensors, one at a time (a collective): `sink` gets each on every rank that holds
  // it, the rank writing an export all of them. No rank holds more than one whole tensor beyond
  // what its sink keeps, so an export's peak on the device is one tensor, not the model.
  virtual absl::Status GatherFull(const NamedTensors& local, const WholeTensorSink& sink) const = 0;
  // This rank's pieces for a distributed checkpoint: a shard becomes a view of the rows it holds,
  // its box (global shape, offsets) added to `boxes`; whole tensors stay as they are.
  virtual NamedTensors CheckpointPieces(const NamedTensors& local, TensorBoxes& boxes) const = 0;
  // Whether this rank writes the piece `name` (a piece several tensor-parallel ranks hold alike is
  // written by the first of them).
  virtual bool WritesPiece(const std::string& name) const = 0;
};

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_SHARDED_STATE_H_
