// titan_train: trains a model from a TOML job file plus --section.key=value overrides, in one
// process, in --nproc_per_node local ranks, or as one rank of a job that torchrun, srun or mpirun
// started.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

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
  absl::StatusOr<titan::DistributedRuntime> runtime =
      titan::DistributedRuntime::Connect(*config, *env);
  if (!runtime.ok()) return runtime.status();
  if (absl::Status status = titan::RunTraining(*config, *runtime); !status.ok()) return status;
  // No rank leaves while another may still talk to it.
  return runtime->Barrier();
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::cout << kUsage << titan::JobConfigHelp();
      return 0;
    }
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  // `bazel run` starts us in the runfiles tree; relative paths mean the user's directory.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr) {
    if (::chdir(dir) != 0) PLOG(FATAL) << "chdir " << dir;
  }
  absl::StatusOr<int> nproc = titan::NprocPerNode(argc, argv);
  if (nproc.ok() && *nproc > 0) {
    absl::StatusOr<int> exit_code = titan::LaunchLocalRanks(*nproc, argc, argv);
    if (exit_code.ok()) return *exit_code;
    nproc = exit_code.status();
  }
  absl::Status status = nproc.ok() ? Run(argc, argv) : nproc.status();
  if (!status.ok()) {
    std::cerr << "titan_train: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
