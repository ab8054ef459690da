// titan_train: trains a model from a TOML job file plus --section.key=value overrides, in one
// process, in --nproc_per_node local ranks, or as one rank of a job that torchrun, srun or mpirun
// started.
#include <string>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/distributed/launcher.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/train/trainer.h"

namespace {

constexpr char kUsage[] =
    "usage: titan_train [--nproc_per_node=N] --job.config_file=FILE [--section.key=value ...]\n"
    "Trains the model the job file describes; flags override the file's keys. --nproc_per_node=N\n"
    "runs N ranks on this host (as torchrun --standalone); [parallelism] says how they split the\n"
    "work.\n\n";

absl::Status Run(int argc, char** argv) {
  absl::StatusOr<titan::DistributedEnv> env = titan::DetectDistributedEnv();
  if (!env.ok()) return env.status();
  absl::StatusOr<titan::JobConfig> config = titan::LoadJobConfig(argc, argv);
  if (!config.ok()) return config.status();
  if (absl::Status status = titan::ValidateJobConfig(*config, env->world_size); !status.ok()) {
    return status;
  }
  if (config->rl().ByteSizeLong() != 0) {
    return absl::InvalidArgumentError("[rl]: the RL section is titan_rl's; titan_train ignores "
                                      "nothing, so remove it or run titan_rl");
  }
  absl::StatusOr<titan::DistributedRuntime> runtime =
      titan::DistributedRuntime::Connect(*config, *env);
  if (!runtime.ok()) return runtime.status();
  if (absl::Status status = titan::RunTraining(*config, *runtime); !status.ok()) return status;
  // No rank leaves while another may still talk to it.
  return runtime->Barrier();
}

}  // namespace

int main(int argc, char** argv) {
  return titan::RunRankedTool(argc, argv, "titan_train", kUsage + titan::JobConfigHelp(),
                              [&] { return Run(argc, argv); });
}
