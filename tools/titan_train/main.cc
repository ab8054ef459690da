// titan_train: trains a model from a TOML job file plus --section.key=value overrides.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/train/trainer.h"

namespace {

constexpr char kUsage[] =
    "usage: titan_train --job.config_file=FILE [--section.key=value ...]\n"
    "Trains the model the job file describes; flags override the file's keys.\n\n";

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
  absl::StatusOr<titan::JobConfig> config = titan::LoadJobConfig(argc, argv);
  absl::Status status = config.status();
  if (status.ok()) status = titan::ValidateJobConfig(*config);
  if (status.ok()) status = titan::RunTraining(*config);
  if (!status.ok()) {
    std::cerr << "titan_train: " << status.message() << "\n";
    return 1;
  }
  return 0;
}
