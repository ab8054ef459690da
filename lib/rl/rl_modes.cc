#include "lib/rl/rl_modes.h"

#include <ATen/ATen.h>  // before glog: LibTorch defines its own LOG, which hides glog's INFO lines
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "lib/distributed/communicator.h"
#include "lib/metrics/flops.h"
#include "lib/rl/examples.h"
#include "lib/train/components.h"
#include "lib/train/stop_signal.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/short_text.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// True when `a` and `b` are one existing file, whatever the spelling, links included.
bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// Rank r's part of `output` for rank 0 to merge: hidden, in the output's folder, named after the
// run (`run_id`, agreed by all ranks), so that no user's file is overwritten or removed.
std::string PartPath(const std::string& output, const std::string& run_id, int rank) {
  return JoinPath(Dirname(output), absl::StrCat(".", Basename(output), ".", run_id, ".rank", rank));
}

// Writes `output` (atomically): one row per prompt, in prompt order, from every rank's `rows`
// (rank r has prompts r, r + world, ...). Ranks > 0 hand theirs to rank 0 in PartPath files,
// which rank 0 removes once merged, or failed to.
absl::Status MergeRankRows(const DistributedRuntime& runtime, int world, size_t total,
                           const std::string& output, const std::string& run_id,
                           const std::vector<std::string>& rows) {
  const int rank = runtime.rank();
  auto part_path = [&](int r) { return PartPath(output, run_id, r); };
  const absl::Status written =
      rank == 0
          ? absl::OkStatus()
          : WriteFileAtomically(part_path(rank), absl::StrCat(absl::StrJoin(rows, "\n"), "\n"));
  // Every rank's failure, "" where it wrote: the merge's error names the rank and its cause.
  absl::StatusOr<std::vector<std::string>> failures =
      runtime.distributed()
          ? AllGatherStrings(runtime.comm(MeshGroup::kWorld), std::string(written.message()))
          : std::vector<std::string>(1);
  if (!written.ok()) return written;
  if (!failures.ok()) return failures.status();
  absl::Status parts_written = absl::OkStatus();
  for (int r = 1; r < world && parts_written.ok(); ++r) {
    if ((*failures)[r].empty()) continue;
    parts_written = absl::InternalError(
        absl::StrCat("rank ", r, " failed to write its part of ", output, ": ", (*failures)[r]));
  }
  if (rank != 0) return parts_written;
  const absl::Status merged = [&]() -> absl::Status {
    if (!parts_written.ok()) return parts_written;
    std::vector<std::vector<std::string>> by_rank = {rows};
    for (int r = 1; r < world; ++r) {
      absl::StatusOr<std::string> part = ReadFile(part_path(r));
      if (!part.ok()) return part.status();
      by_rank.push_back(absl::StrSplit(*part, '\n', absl::SkipEmpty()));
    }
    std::string text;
    for (size_t i = 0; i < total; ++i) {
      const std::vector<std::string>& share = by_rank[i % world];
      if (i / world >= share.size()) {
        return absl::InternalError(absl::StrCat(part_path(i % world), ": ", share.size(),
                                                " rows, expected a row for prompt ", i + 1));
      }
      absl::StrAppend(&text, share[i / world], "\n");
    }
    return WriteFileAtomically(output, text);
  }();
  for (int r = 1; r < world; ++r) {
    if (std::remove(part_path(r).c_str()) != 0 && errno != ENOENT) {
      PLOG(WARNING) << "remove " << part_path(r);
    }
  }
  return merged;
}

}  // namespace

absl::StatusOr<std::string> GenerationOutputPath(const JobConfig& config,
                                                 const std::string& output_flag) {
  std::string output =
      output_flag.empty() ? config.job().dump_folder() + "/generations.jsonl" : output_flag;
  if (IsDirectory(output)) {
    return absl::InvalidArgumentError(absl::StrCat(
        output, " is a directory: --generate writes one JSONL file; pass --output=FILE"));
  }
  for (const auto& [key, input] :
       {std::pair{"prompts_path", config.rl().prompts_path()},
        std::pair{"eval_prompts_path", config.rl().eval_prompts_path()}}) {
    if (!input.empty() && SameFile(output, input)) {
      return absl::InvalidArgumentError(absl::StrCat("--generate would write ", output,
                                                     ", which is [rl] ", key, " = ", input,
                                                     "; pass another --output"));
    }
  }
  // The file is replaced whole (a rename): a link, device or FIFO there would be replaced too.
  struct stat there;
  if (::lstat(output.c_str(), &there) == 0 && !S_ISREG(there.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        output,
        " is not a regular file (a link, device or FIFO): --generate replaces its output "
        "file whole; pass --output=FILE"));
  }
  // Each rank writes its part beside the output: a folder that cannot take them is said here, by
  // every rank, not as rank 0's "another rank failed" after the generation. The default's folder,
  // the dump folder, is made later.
  if (!output_flag.empty()) {
    const std::string dir = Dirname(output);
    if (!IsDirectory(dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--output=", output, ": its folder ", dir,
                       PathExists(dir) ? " is not a folder" : " does not exist"));
    }
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--output=", output, ": cannot write in ", dir, ": ", std::strerror(errno)));
    }
  }
  return output;
}

absl::StatusOr<std::string> PolicyWeightsFrom(const RlTrainer& trainer, const JobConfig& config,
                                              bool random_weights) {
  if (!trainer.weights_from().empty()) {
    // The flag asks for a random policy, which these weights would silently replace.
    if (random_weights) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--random_weights asks for a random policy, but the policy loads ",
          trainer.weights_from(),
          ": --random_weights is for a run with no checkpoint under [job] dump_folder and no "
          "[checkpoint] initial_load_path; drop it, or unset those"));
    }
    LOG(INFO) << "policy weights from " << trainer.weights_from();
    return trainer.weights_from();
  }
  const std::string why = absl::StrCat(
      config.checkpoint().enable()
          ? absl::StrCat("no checkpoint under [job] dump_folder = ", config.job().dump_folder())
          : std::string("[checkpoint] enable = false"),
      " and no [checkpoint] initial_load_path");
  if (!random_weights) {
    return absl::FailedPreconditionError(
        absl::StrCat("the policy would be randomly initialised: ", why,
                     "; set one, or pass --random_weights to use a random model"));
  }
  LOG(WARNING) << "--random_weights: the policy is randomly initialised: " << why;
  return std::string("random initialisation");
}

absl::StatusOr<nlohmann::json> GenerateToFile(RlTrainer& trainer, const JobConfig& config,
                                              const DistributedRuntime& runtime,
                                              const std::string& output) {
  // The default output's folder, the dump folder, is made only now that the weights are known
  // (an --output's folder exists: GenerationOutputPath checked it).
  if (!IsDirectory(Dirname(output))) {
    TITAN_RETURN_IF_ERROR(MakeDumpFolder(config));
  }
  // Rank r takes every world-th prompt: data-parallel generation over the (sharded) policy.
  const int rank = runtime.rank();
  const int world = runtime.distributed() ? runtime.dims().world_size() : 1;
  const std::vector<RlExample>& examples =
      config.rl().prompts_path().empty() ? trainer.eval_examples() : trainer.train_examples();
  // Every rank runs the same forwards (FSDP gathers), so each needs a prompt.
  if (examples.size() < static_cast<size_t>(world)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--generate: ", examples.size(), " prompts for ", world,
                     " ranks: every rank needs at least one; run on at most ", examples.size(),
                     " (--nproc_per_node) or give more prompts"));
  }
  std::vector<std::string> prompts;
  for (size_t i = rank; i < examples.size(); i += world) prompts.push_back(examples[i].prompt);
  const uint64_t seed = static_cast<uint64_t>(trainer.seed());
  SamplingOptions options = trainer.SamplingFromConfig(seed, config.rl().temperature() == 0);
  // Each prompt draws from its own generator, seeded by its index in the file: its response does
  // not depend on the other prompts or on --nproc_per_node.
  for (size_t i = rank; i < examples.size() && options.temperature > 0; i += world) {
    options.row_seeds.push_back(RowSeed(seed, i));
  }
  Stopwatch stopwatch;
  // The process's CPU time over all threads: on shared cores a fairer rate than the wall clock.
  const std::clock_t cpu_start = std::clock();
  absl::StatusOr<Generation> generation = trainer.Generate(prompts, options);
  if (!generation.ok()) return generation.status();
  const double seconds = stopwatch.Lap();
  const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  std::vector<std::string> lines;
  int64_t generated = 0;
  // Read through accessors: an item() per token is a dispatch each.
  const at::Tensor logprob_values = generation->logprobs.cpu().to(at::kDouble);
  const auto logprobs = logprob_values.accessor<double, 2>();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const TokenIds& response = generation->responses[i];
    generated += static_cast<int64_t>(response.size());
    const std::vector<int32_t> ids(response.begin(), response.end());
    // Ids past the tokenizer decode as nothing; response_ids keeps them.
    absl::StatusOr<std::string> text = trainer.tokenizer().Decode(ids, UnknownIds::kEmpty);
    if (!text.ok()) return text.status();
    std::vector<double> lp;
    for (size_t t = 0; t < response.size(); ++t) lp.push_back(logprobs[i][t]);
    lines.push_back(
        JsonText(nlohmann::json{{"prompt", prompts[i]},
                                {"prompt_ids", generation->prompts[i]},
                                {"response", *text},
                                {"response_ids", response},
                                {"logprobs", lp},
                                {"stopped", static_cast<bool>(generation->stopped[i])}}));
  }
  if (absl::Status status =
          MergeRankRows(runtime, world, examples.size(), output, trainer.run_id(), lines);
      !status.ok()) {
    return status;
  }
  // Totals over the ranks: prompts, tokens and CPU time add up; the wall clock is the slowest's.
  at::Tensor sums = at::tensor(
      {static_cast<double>(prompts.size()), static_cast<double>(generated), cpu_seconds});
  at::Tensor maxima = at::tensor({static_cast<double>(generation->decode_steps), seconds});
  if (runtime.distributed()) {
    Communicator& comm = runtime.comm(MeshGroup::kWorld);
    if (absl::Status s = Await(comm.AllReduce(sums, ReduceOp::kSum)); !s.ok()) {
      return s;
    }
    if (absl::Status s = Await(comm.AllReduce(maxima, ReduceOp::kMax)); !s.ok()) {
      return s;
    }
  }
  const int64_t all_generated = static_cast<int64_t>(sums[1].item<double>());
  const double wall = maxima[1].item<double>();
  nlohmann::json summary = {{"output", output},
                            {"prompts", static_cast<int64_t>(sums[0].item<double>())},
                            {"generated_tokens", all_generated},
                            {"decode_steps", static_cast<int64_t>(maxima[0].item<double>())},
                            {"seconds", wall},
                            {"cpu_seconds", sums[2].item<double>()},
                            {"tokens_per_second", all_generated / wall}};
  return summary;
}

absl::StatusOr<nlohmann::json> StepOnRolloutsFile(RlTrainer& trainer, const JobConfig& config,
                                                  const DistributedRuntime& runtime,
                                                  const std::string& path, bool save_as_next_step) {
  // Before the file is read: the run's schedule has no step to add.
  if (save_as_next_step && trainer.state().step >= config.training().steps()) {
    // A finished run's model-only final step: raising [training] steps would not help.
    const std::string& from = trainer.weights_from();
    if (trainer.resumed_model_only()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--save_step: ", from,
          ", the run's last step, holds model weights only (a "
          "last_save_model_only export), so no step follows it in this run; to train on from "
          "these weights start a new run with [checkpoint] initial_load_path=",
          from, " in another [job] dump_folder"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "--save_step: the run is at step ", trainer.state().step, ", its last ([training] steps = ",
        config.training().steps(), "): raise [training] steps to add steps"));
  }
  absl::StatusOr<std::vector<RewardedRollout>> rows =
      ReadRewardedRollouts(path, config.rl().algorithm());
  if (!rows.ok()) return rows.status();
  // Rank r takes the r-th contiguous share, so groups stay whole when the shares are multiples
  // of [rl] group_size.
  const int world = runtime.distributed() ? runtime.dims().world_size() : 1;
  if (rows->size() % world != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", rows->size(), " rollouts for ", world,
                     " ranks: each rank takes an equal share, so give a multiple of ", world));
  }
  const size_t share = rows->size() / world;
  const int64_t group = config.rl().group_size();
  if (config.rl().algorithm() != "ppo" && share % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", rows->size(), " rollouts over ", world, " ranks: each rank takes a share of ",
        share, ", which does not split into [rl] group_size = ", group,
        " groups (give a multiple of ", group * world, ")"));
  }
  // Groups are taken by position: rows of several prompts in one would mix their baselines.
  if (config.rl().algorithm() != "ppo") TITAN_RETURN_IF_ERROR(CheckRolloutGroups(*rows, group));
  // The rows' log-probabilities are the behaviour policy's: the old ones, unless [rl]
  // old_logprobs asks for the trainer's.
  const bool given_logprobs = rows->front().has_logprobs;
  const bool use_logprobs = given_logprobs && config.rl().old_logprobs() == "generator";
  if (given_logprobs && !use_logprobs && runtime.rank() == 0) {
    LOG(INFO) << path << ": its \"logprobs\" are not read: [rl] old_logprobs = \""
              << config.rl().old_logprobs() << "\" computes the old log-probabilities";
  }
  std::vector<std::string> prompts, responses, where;
  std::vector<double> rewards;
  std::vector<std::vector<double>> logprobs;
  std::vector<std::optional<TokenIds>> response_ids, prompt_ids;
  for (size_t i = runtime.rank() * share; i < (runtime.rank() + 1) * share; ++i) {
    prompts.push_back((*rows)[i].prompt);
    responses.push_back((*rows)[i].response);
    rewards.push_back((*rows)[i].reward);
    where.push_back((*rows)[i].where);
    if (use_logprobs) logprobs.push_back((*rows)[i].logprobs);
    response_ids.push_back((*rows)[i].response_ids);
    prompt_ids.push_back((*rows)[i].prompt_ids);
  }
  // --save_step: SIGINT/SIGTERM let the update and its save finish, as a training step's do.
  std::optional<StopSignal> stop_signal;
  if (save_as_next_step) {
    stop_signal.emplace(runtime);
    LOG(INFO) << "updating on " << rows->size()
              << " rollouts (SIGINT/SIGTERM now finish the update and save it)";
  }
  // A too-long row, or one whose log-probabilities are not one per token, is refused by its
  // file:line.
  absl::StatusOr<StepMetrics> metrics =
      trainer.Step(prompts, responses, rewards, where, logprobs, response_ids, prompt_ids);
  if (!metrics.ok()) return metrics.status();
  std::string weights;
  if (save_as_next_step) {
    TITAN_ASSIGN_OR_RETURN(weights, trainer.SaveAsNextStep(*metrics));
    if (const int signal = StopSignal::Received(); signal != 0) {
      LOG(WARNING) << "received signal " << signal << " during the update: it finished and was "
                   << "saved as " << weights;
    }
  } else {
    weights = config.job().dump_folder() + "/step_weights.safetensors";
    TITAN_RETURN_IF_ERROR(MakeDumpFolder(config));
    TITAN_RETURN_IF_ERROR(trainer.SavePolicyWeights(weights));
  }
  // mfu is null where the device's peak is unknown (a CPU); the update's metrics are left out of
  // a step without an optimizer step, as in metrics.jsonl.
  nlohmann::json summary = {{"weights", weights}};
  if (metrics->updated) {
    summary["loss"] = metrics->loss;
    summary["grad_norm"] = metrics->grad_norm;
    summary["tps"] = metrics->tps;
    summary["tflops"] = metrics->tflops;
    summary["mfu"] = metrics->mfu.has_value() ? nlohmann::json(*metrics->mfu) : nlohmann::json();
  }
  if (save_as_next_step) summary["step"] = trainer.state().step;
  for (const auto& [name, value] : metrics->extra) summary[name] = value;
  return summary;
}

}  // namespace titan
