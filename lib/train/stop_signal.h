#ifndef TITAN_LIB_TRAIN_STOP_SIGNAL_H_
#define TITAN_LIB_TRAIN_STOP_SIGNAL_H_

#include <ATen/ATen.h>

#include <memory>

#include "absl/status/statusor.h"
#include "lib/distributed/communicator.h"
#include "lib/parallel/distributed_runtime.h"

namespace titan {

// SIGINT/SIGTERM/SIGHUP as a request to stop after a step (and save), agreed by every rank: each
// step issues an all-reduce (max) of this rank's signal and reads the one issued a step before, so
// no step waits for it and all ranks stop after the same step. A second signal ends the process at
// once, by the signal's default action.
class StopSignal {
 public:
  // Installs the handlers (process-wide) and forgets any earlier signal.
  explicit StopSignal(const DistributedRuntime& runtime);
  ~StopSignal();

  // The signal every rank agreed on a step ago (0: none); one process reads its own at once.
  absl::StatusOr<int> Agreed();
  // Waits for the all-reduce in flight (the run ends).
  absl::Status Finish();
  // This process's own signal since the handlers were installed (0: none), not agreed: for a wait
  // that ends at once on a signal (titan_rl's reward_command).
  static int Received();

 private:
  const DistributedRuntime& runtime_;
  at::Tensor flag_;             // the all-reduce in flight
  std::unique_ptr<Work> work_;  // null: none in flight
};

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_STOP_SIGNAL_H_
