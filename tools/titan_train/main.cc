// titan_train: trains a model from a TOML job file plus --section.key=value overrides, in one
// process, in --nproc_per_node local ranks, or as one rank of a job that torchrun, srun or mpirun
// started.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
  absl::StatusOr<titan::JobConfig> config = titan::ParseJobConfig("", args);
  if (!config.ok()) return config.status();
  // An [rl] section at its defaults is accepted: config.toml holds one, and must run again.
  if (const std::vector<std::string> changed = titan::ChangedKeys(*config, "rl");
      !changed.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(changed.front(),
                     ": [rl] is titan_rl's section, which titan_train would "
                     "ignore; leave it at its defaults or run titan_rl"));
  }
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
