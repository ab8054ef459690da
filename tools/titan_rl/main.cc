// titan_rl: RL post-training (SFT, GRPO, DAPO, PPO, DPO) from a TOML job file with an [rl]
// section, in one process or --nproc_per_node local ranks; or generation alone (--generate); or
// one update on given rollouts (--step_rollouts).
#include <ATen/ATen.h>  // before glog: LibTorch defines its own LOG, which hides glog's INFO lines

#include <cstdio>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "lib/config/job_config.h"
#include "lib/distributed/distributed_env.h"
#include "lib/distributed/launcher.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/rl/rl_config.h"
#include "lib/rl/rl_modes.h"
#include "lib/rl/rl_trainer.h"
#include "lib/util/short_text.h"
#include "lib/util/torch_errors.h"
#include "nlohmann/json.hpp"
#include "tools/common/flag_value.h"
#include "tools/common/tool_output.h"

namespace {

constexpr char kUsage[] =
    "usage: titan_rl [--nproc_per_node=N] --job.config_file=FILE [--section.key=value ...]\n"
    "       titan_rl --generate [--output=FILE] [--json] [--random_weights]\n"
    "                --job.config_file=FILE ...\n"
    "       titan_rl --step_rollouts=FILE [--save_step] [--json] [--random_weights]\n"
    "                --job.config_file=FILE ...\n"
    "Trains with the [rl] algorithm of the job file (sft, grpo, dapo, ppo, dpo): rollouts.jsonl,\n"
    "metrics.jsonl, TensorBoard and checkpoints under [job] dump_folder. --generate samples\n"
    "responses to [rl] prompts_path (or the task's held-out prompts) with the policy and writes\n"
    "them as JSONL (default <dump_folder>/generations.jsonl; one file in prompt order whatever\n"
    "--nproc_per_node); --step_rollouts runs one update on the rollouts in FILE (JSONL: prompt,\n"
    "response, reward, optionally logprobs: the old log-probabilities, one per response token,\n"
    "and response_ids and prompt_ids: the token ids sampled and sampled after, trained on\n"
    "instead of the texts' encodings;\n"
    "each rank takes an equal contiguous share, in order; for grpo and dapo each run of\n"
    "[rl] group_size rows is one prompt's group, and a row of another prompt is refused)\n"
    "and writes the\n"
    "updated policy weights to <dump_folder>/step_weights.safetensors (not PPO's value head);\n"
    "with --save_step the update is instead the run's next checkpoint step (step-<N+1>: policy,\n"
    "optimizer, PPO's value head; a metrics.jsonl row), saved under the run's folder lock as\n"
    "training saves a step, so --step_rollouts chains (rollouts from another generator, one\n"
    "step at a time) and --generate or a training run continue from it; it needs\n"
    "[checkpoint] enable and a step left before [training] steps.\n"
    "Both use the newest checkpoint under [job] dump_folder, else [checkpoint] initial_load_path;\n"
    "with neither they refuse to run unless --random_weights asks for a random policy\n"
    "(refused where there are weights to load).\n"
    "--json prints one JSON summary line on stdout, totals over the ranks, without the\n"
    "launcher's \"[rank 0] \" prefix (its weights_from names the weights: the checkpoint step\n"
    "folder, the initial load, or \"random initialisation\"); a failure prints\n"
    "{\"error\": \"...\"} there instead (rank 0's) as well as the message on stderr.\n\n";

struct ToolFlags {
  bool generate = false;
  bool json = false;
  bool random_weights = false;
  bool save_step = false;
  std::string output;
  std::string step_rollouts;
  std::string error;                   // a tool flag given without its value
  std::vector<std::string> overrides;  // everything else: job keys
};

ToolFlags ParseToolFlags(int argc, char** argv) {
  ToolFlags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--generate") {
      flags.generate = true;
    } else if (arg == "--json") {
      flags.json = true;
    } else if (arg == "--random_weights") {
      flags.random_weights = true;
    } else if (arg == "--save_step") {
      flags.save_step = true;
    } else if (absl::StartsWith(arg, "--output=")) {
      flags.output = arg.substr(9);
    } else if (absl::StartsWith(arg, "--step_rollouts=")) {
      flags.step_rollouts = arg.substr(16);
    } else if (arg == "--output" || arg == "--step_rollouts") {
      // gflags' spelling: the value is the next argument, unless that is a flag ("--output
      // --json" would write a file named --json with --json unread): --output=FILE takes any.
      if (i + 1 == argc || absl::StartsWith(argv[i + 1], "--")) {
        if (flags.error.empty()) {
          flags.error = titan::MissingValueError(arg, i + 1 == argc ? "" : argv[i + 1],
                                                 absl::StrCat(arg, "=FILE"), "any file name");
        }
      } else {
        (arg == "--output" ? flags.output : flags.step_rollouts) = argv[++i];
      }
    } else if (!absl::StartsWith(arg, "--nproc_per_node")) {
      flags.overrides.push_back(arg);
    } else if (arg == "--nproc_per_node") {
      ++i;  // its value
    }
  }
  return flags;
}

absl::Status Run(const ToolFlags& flags) {
  if (!flags.error.empty()) return absl::InvalidArgumentError(flags.error);
  // First: it says what the other flags' refusals (--json's) would only hint at.
  if (flags.save_step && flags.step_rollouts.empty()) {
    return absl::InvalidArgumentError(
        "--save_step saves --step_rollouts' update as the run's next step; without "
        "--step_rollouts there is no such update (a training run saves its steps itself)");
  }
  if (flags.json && !flags.generate && flags.step_rollouts.empty()) {
    return absl::InvalidArgumentError(
        "--json: only --generate and --step_rollouts print a JSON summary; a training run writes "
        "metrics.jsonl under [job] dump_folder");
  }
  if (!flags.output.empty() && !flags.generate) {
    return absl::InvalidArgumentError(
        "--output names --generate's output file; without --generate nothing is written there");
  }
  if (flags.random_weights && !flags.generate && flags.step_rollouts.empty()) {
    return absl::InvalidArgumentError(
        "--random_weights: only --generate and --step_rollouts refuse a random policy; a training "
        "run starts from one unless [checkpoint] initial_load_path is set");
  }
  if (flags.generate && !flags.step_rollouts.empty()) {
    return absl::InvalidArgumentError("--generate and --step_rollouts: give one of them");
  }
  absl::StatusOr<titan::JobConfig> config = titan::ParseJobConfig("", flags.overrides);
  if (!config.ok()) return config.status();
  // Before RunJobOnThisRank's ValidateJobConfig, whose dataset checks ask for keys refused here.
  if (absl::Status status = titan::RefuseTrainerDataKeys(*config); !status.ok()) {
    return titan::WithKeySource(status);
  }
  return titan::RunJobOnThisRank(*config, [&](const titan::DistributedRuntime& runtime)
                                              -> absl::Status {
    if (!flags.generate && flags.step_rollouts.empty()) return titan::RunRl(*config, runtime);
    const titan::RlMode mode = flags.generate    ? titan::RlMode::kGenerate
                               : flags.save_step ? titan::RlMode::kStepRolloutsSaved
                                                 : titan::RlMode::kStepRollouts;
    absl::StatusOr<titan::JobConfig> rl_config = titan::RlJobConfig(*config, mode);
    if (!rl_config.ok()) return rl_config.status();
    std::string output;
    if (flags.generate) {
      // Before the model loads.
      absl::StatusOr<std::string> checked = titan::GenerationOutputPath(*rl_config, flags.output);
      if (!checked.ok()) return checked.status();
      output = *std::move(checked);
    }
    return titan::CatchTorchErrors([&]() -> absl::Status {
      absl::StatusOr<std::unique_ptr<titan::RlTrainer>> trainer =
          titan::RlTrainer::Create(*rl_config, runtime, mode);
      if (!trainer.ok()) return trainer.status();
      absl::StatusOr<std::string> weights_from =
          titan::PolicyWeightsFrom(**trainer, *rl_config, flags.random_weights);
      if (!weights_from.ok()) return weights_from.status();
      absl::StatusOr<nlohmann::json> summary =
          flags.generate ? titan::GenerateToFile(**trainer, *rl_config, runtime, output)
                         : titan::StepOnRolloutsFile(**trainer, *rl_config, runtime,
                                                     flags.step_rollouts, flags.save_step);
      if (!summary.ok()) return summary.status();
      (*summary)["weights_from"] = *weights_from;
      if (runtime.rank() != 0) return absl::OkStatus();
      if (flags.json) {
        std::cout << titan::JsonText(*summary) << std::endl;
        // As convert_checkpoint --json: exit 0 comes with the output and its summary, exit 1 with
        // neither, so that a script never finds an output its run says failed. A failure, not a
        // 0 for CheckStdoutAtExit to turn into 1: a reader gone would make that 0 a SIGPIPE exit.
        if (flags.generate && !titan::FlushStdout().ok()) {
          if (std::remove(output.c_str()) != 0) {
            PLOG(WARNING) << "--generate: the summary was lost, but " << output
                          << " could not be removed";
            return absl::DataLossError("--generate: the JSON summary could not be written");
          }
          return absl::DataLossError(absl::StrCat(
              "--generate: the JSON summary could not be written, so ", output, " was removed"));
        }
      } else if (flags.generate) {
        LOG(INFO) << "generated " << (*summary)["generated_tokens"] << " tokens for "
                  << (*summary)["prompts"] << " prompts in " << (*summary)["seconds"] << " s ("
                  << (*summary)["tokens_per_second"] << " tokens/s) -> " << output;
      } else {
        LOG(INFO) << "step on " << flags.step_rollouts << ": " << titan::JsonText(*summary);
      }
      return absl::OkStatus();
    });
  });
}

// Run, with a --json failure also a JSON line on stdout, from rank 0 alone: the one whose stdout
// passes through the launcher unprefixed.
absl::Status RunReportingJson(const ToolFlags& flags) {
  const absl::Status status = Run(flags);
  if (status.ok() || !flags.json) return status;
  const absl::StatusOr<titan::DistributedEnv> env = titan::DetectDistributedEnv();
  if (!env.ok() || env->rank == 0) titan::PrintJsonError(status.message());
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  titan::CheckStdoutAtExit("titan_rl");
  const ToolFlags flags = ParseToolFlags(argc, argv);
  titan::LaunchOptions launch;
  // Rank 0 alone prints --json's summary: stdout stays one JSON line.
  if (flags.json) {
    launch.plain_stdout_rank = 0;
    launch.report_failure = [](absl::string_view message) { titan::PrintJsonError(message); };
  }
  return titan::RunRankedTool(
      argc, argv, "titan_rl", kUsage + titan::JobConfigHelp(),
      [&] { return RunReportingJson(flags); }, launch);
}
