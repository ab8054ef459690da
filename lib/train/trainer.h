#ifndef TITAN_LIB_TRAIN_TRAINER_H_
#define TITAN_LIB_TRAIN_TRAINER_H_

#include "absl/status/status.h"
#include "lib/config/job_config.pb.h"
#include "lib/parallel/distributed_runtime.h"

namespace titan {

// Trains the job described by `config` to the end (or to a SIGINT/SIGTERM, after which it saves a
// checkpoint and returns OK). The one library call behind titan_train. With several ranks
// (`runtime` connected), every rank calls it: the model is data-parallel as [parallelism] says,
// each rank reads its share of every global batch, and only rank 0 writes config.toml, metrics and
// checkpoints (sharded state is gathered to full tensors first).
absl::Status RunTraining(const JobConfig& config,
                         const DistributedRuntime& runtime = DistributedRuntime::SingleProcess());

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_TRAINER_H_
