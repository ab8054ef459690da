#ifndef TITAN_LIB_TRAIN_TRAINER_H_
#define TITAN_LIB_TRAIN_TRAINER_H_

#include "absl/status/status.h"
#include "lib/config/job_config.pb.h"

namespace titan {

// Trains the job described by `config` to the end (or to a SIGINT/SIGTERM, after which it saves a
// checkpoint and returns OK). The one library call behind titan_train.
absl::Status RunTraining(const JobConfig& config);

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_TRAINER_H_
