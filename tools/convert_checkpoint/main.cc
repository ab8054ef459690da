// convert_checkpoint --from=hf|meta|titan --to=hf|meta|titan [--model=qwen3] [--flavor=8B]
//     [--dtype=bf16|fp32|keep] IN OUT
// Converts a checkpoint of any registered model family between Hugging Face's *ForCausalLM
// folders, titan's step directories and Meta's format (see lib/interop/convert.h).

#include <signal.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "lib/interop/convert.h"
#include "lib/util/short_text.h"
#include "nlohmann/json.hpp"
#include "tools/common/tool_flags.h"
#include "tools/common/tool_output.h"

DEFINE_string(from, "", "Input format: titan, hf or meta; empty: detected from the files");
DEFINE_string(to, "hf", "Output format: titan, hf or meta");
DEFINE_string(model, "",
              "Model family (llama3, qwen3); empty: what the input says (config.json's "
              "model_type, the titan manifest, llama3 for Meta) or the flavor its shapes match; "
              "checked against the input when given");
DEFINE_string(flavor, "",
              "Model flavor (e.g. debugmodel, 8B) when the input does not describe it; checked "
              "against the input when it does");
DEFINE_string(dtype, "keep", "Floating tensors' output dtype: keep, bf16 or fp32");
DEFINE_string(max_shard_size, "5GB", "hf output: largest shard (KB/MB/GB, KiB/MiB/GiB)");
DEFINE_string(tokenizer_dir, "", "hf output: copy tokenizer files from this directory");
DEFINE_int64(step, -1, "titan output: the step to write (>= 0); unset: the input's step, else 0");
DEFINE_bool(json, false, "Print a JSON summary on stdout");

namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal) { g_stop_signal = signal; }

// Whether the flag was given on the command line (the output-specific ones are refused for other
// outputs only then).
bool IsSet(const char* flag) { return !gflags::GetCommandLineFlagInfoOrDie(flag).is_default; }

// With --json a failure is also a JSON object on stdout, for the script parsing it.
int Fail(const absl::Status& status) {
  std::cerr << "convert_checkpoint: " << status.message() << "\n";
  if (FLAGS_json) titan::PrintJsonError(status.message());
  return 1;
}

// --json's result: the summary and the peak memory.
void PrintSummary(const titan::ConvertSummary& summary) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const nlohmann::json out = {{"input", summary.input},
                              {"output", summary.output},
                              {"model", summary.model},
                              // As checkpoint_inspect words it.
                              {"flavor", summary.flavor.empty() ? "custom" : summary.flavor},
                              {"tensors", summary.tensors},
                              {"bytes", summary.bytes},
                              {"files", summary.files},
                              {"peak_rss_bytes", static_cast<int64_t>(usage.ru_maxrss) * 1024}};
  std::cout << titan::JsonText(out, 2) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  titan::CheckStdoutAtExit("convert_checkpoint");
  titan::ParseToolFlags(
      "convert_checkpoint --from=hf|meta|titan --to=hf|meta|titan [--model=qwen3] [--flavor=8B] "
      "[--dtype=keep|bf16|fp32] IN OUT",
      &argc, &argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (argc != 3) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("expected IN and OUT, got ", argc - 1, " arguments (see --help)")));
  }
  // An empty path would name the root or the working directory in the errors that follow.
  if (argv[1][0] == '\0' || argv[2][0] == '\0') {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        argv[1][0] == '\0' ? "IN" : "OUT", ": expected a checkpoint path, got an empty string")));
  }

  titan::ConvertOptions options;
  if (!FLAGS_from.empty()) {
    absl::StatusOr<titan::CheckpointFormat> from = titan::ParseCheckpointFormat(FLAGS_from);
    if (!from.ok()) return Fail(from.status());
    options.from = *from;
  }
  absl::StatusOr<titan::CheckpointFormat> to = titan::ParseCheckpointFormat(FLAGS_to);
  if (!to.ok()) return Fail(to.status());
  options.to = *to;
  options.model = FLAGS_model;
  options.flavor = FLAGS_flavor;
  options.dtype = FLAGS_dtype;
  if (IsSet("max_shard_size")) {
    absl::StatusOr<uint64_t> max_shard = titan::ParseByteSize(FLAGS_max_shard_size);
    if (!max_shard.ok()) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--max_shard_size: ", max_shard.status().message())));
    }
    options.max_shard_bytes = *max_shard;
  }
  options.tokenizer_dir = FLAGS_tokenizer_dir;
  if (IsSet("step")) options.step = FLAGS_step;
  // SIGINT and SIGTERM stop the conversion, which then removes what it wrote; a second one kills
  // at once.
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  action.sa_flags = SA_RESETHAND | SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  options.stop_signal = &g_stop_signal;
  // The summary reaches stdout once OUT is in place (a failed rename prints none), and a lost
  // one removes OUT again: exit 0 comes with both, exit 1 with neither.
  bool summary_lost = false;
  if (FLAGS_json) {
    options.after_commit = [&summary_lost](const titan::ConvertSummary& summary) {
      PrintSummary(summary);
      absl::Status flushed = titan::FlushStdout();
      summary_lost = !flushed.ok();
      return flushed;
    };
  }

  absl::StatusOr<titan::ConvertSummary> summary =
      titan::ConvertCheckpoint(argv[1], argv[2], options);
  if (summary_lost) return 1;  // CheckStdoutAtExit says why.
  if (!summary.ok()) {
    Fail(summary.status());
    return g_stop_signal != 0 ? 128 + g_stop_signal : 1;
  }
  return 0;
}
