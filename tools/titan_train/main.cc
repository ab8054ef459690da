// titan_train: trains a model from a TOML job file plus --section.key=value overrides, in one
// process, in --nproc_per_node local ranks, or as one rank of a job that torchrun, srun or mpirun
// started.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/distributed/launcher.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/train/trainer.h"
#include "tools/common/tool_output.h"

namespace {

constexpr char kUsage[] =
    "usage: titan_train [--nproc_per_node=N] --job.config_file=FILE [--section.key=value ...]\n"
    "Trains the model the job file describes; flags override the file's keys. --nproc_per_node=N\n"
    "runs N ranks on this host (as torchrun --standalone; at most 8 per CPU core); [parallelism]\n"
    "says how they split the work.\n\n";

absl::Status Run(int argc, char** argv) {
  const std::vector<std::string> args(argv + std::min(argc, 1), argv + argc);
  if (absl::Status given = titan::CheckJobGiven(args); !given.ok()) return given;
  absl::StatusOr<titan::JobConfig> config =
      titan::ParseJobConfig("", args, titan::UnreadSection{"rl", "titan_rl", "titan_train"});
  if (!config.ok()) return config.status();
  return titan::RunJobOnThisRank(*config, [&](const titan::DistributedRuntime& runtime) {
    return titan::RunTraining(*config, runtime);
  });
}

}  // namespace

int main(int argc, char** argv) {
  titan::CheckStdoutAtExit("titan_train");
  return titan::RunRankedTool(argc, argv, "titan_train", kUsage + titan::JobConfigHelp(),
                              [&] { return Run(argc, argv); });
}
