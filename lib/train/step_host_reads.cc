#include "lib/train/step_host_reads.h"

#include "lib/profiling/host_read_counter.h"

namespace titan {

StepHostReads CountStepHostReads(Trainer& trainer, const std::vector<Batch>& microbatches,
                                 bool read_metrics) {
  std::vector<at::Tensor> step_counters;
  for (const at::Tensor& t : trainer.optimizer().StateTensors()) {
    if (t.dim() == 0) step_counters.push_back(t);
  }
  const HostReadCounter counter(step_counters);
  StepHostReads reads;
  reads.result = trainer.TrainStep(microbatches, /*labels_masked=*/false, read_metrics);
  reads.device_values = counter.reads();
  reads.step_counters = counter.expected_reads();
  return reads;
}

}  // namespace titan
