#ifndef TITAN_LIB_TRAIN_STEP_HOST_READS_H_
#define TITAN_LIB_TRAIN_STEP_HOST_READS_H_

// Tests of the GPU-speed property that a training step reads nothing back from the device.

#include <vector>

#include "absl/status/statusor.h"
#include "lib/train/trainer.h"

namespace titan {

struct StepHostReads {
  absl::StatusOr<StepResult> result;  // the step's
  int device_values = 0;              // host reads of anything but the optimizer's step counters
  int step_counters = 0;              // of the optimizer's step counters (0-dim state tensors)
};

// One TrainStep on this thread (lib/profiling/host_read_counter.h counts its host reads).
StepHostReads CountStepHostReads(Trainer& trainer, const std::vector<Batch>& microbatches,
                                 bool read_metrics);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_STEP_HOST_READS_H_
