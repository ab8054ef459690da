#ifndef TITAN_LIB_PARALLEL_SHARDED_STATE_H_
#define TITAN_LIB_PARALLEL_SHARDED_STATE_H_

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
  // The whole tensors (a collective); the rank writing an export holds them all.
  virtual absl::StatusOr<NamedTensors> GatherFull(const NamedTensors& local) const = 0;
  // This rank's pieces for a distributed checkpoint: a shard becomes a view of the rows it holds,
  // its box (global shape, offsets) added to `boxes`; whole tensors stay as they are.
  virtual NamedTensors CheckpointPieces(const NamedTensors& local, TensorBoxes& boxes) const = 0;
  // Whether this rank writes the piece `name` (a piece several tensor-parallel ranks hold alike is
  // written by the first of them).
  virtual bool WritesPiece(const std::string& name) const = 0;
};

}  // namespace titan

#endif  // TITAN_LIB_PARALLEL_SHARDED_STATE_H_
