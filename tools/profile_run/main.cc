// profile_run: profiles a few training steps of a job exactly as titan_train runs it (same flags,
// same ranks), or analyses a hung job's collective flight-recorder dumps.
#include <algorithm>
#include <iostream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "lib/config/field_value.h"
#include "lib/config/job_config.h"
#include "lib/distributed/comm_trace_analysis.h"
#include "lib/distributed/launcher.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/profiling/profile_run.h"
#include "tools/common/flag_value.h"
#include "tools/common/tool_output.h"

namespace {

constexpr char kUsage[] =
    "usage: profile_run [--nproc_per_node=N] --job.config_file=FILE --out=DIR\n"
    "                   [--profile.warmup=2] [--profile.active=3] [--profile.gzip]\n"
    "                   [--section.key=value ...]\n"
    "       profile_run --analyze_comm_trace=DIR [--comm_trace_prefix=rank_]\n\n"
    "Runs the job as titan_train would (model, parallelism, data, ranks), warmup steps with the\n"
    "profiler started, then traced steps, and writes per rank DIR/traces/trace_rank<r>.json\n"
    "(Perfetto / chrome://tracing; HTA: TraceAnalysis(trace_dir=\"DIR/traces\")) and into DIR\n"
    "ops_rank<r>.txt/.json, profile_rank<r>.json, and report.html + summary.json for all\n"
    "ranks. Nothing is written to the job's dump folder (the collective flight-recorder dumps\n"
    "go to DIR/comm_traces) and no checkpoint is saved or resumed ([checkpoint]\n"
    "initial_load_path still loads). Validation is skipped: only\n"
    "training steps are profiled ([validation] enable = true is logged as skipped).\n"
    "--analyze_comm_trace=DIR reads a job's collective flight-recorder dumps ([comm]\n"
    "save_traces_folder) and names the collective and the ranks that never issued it; it exits\n"
    "as comm_trace_analyze does (0 agree, 2 disagree, 3 inconclusive: ranks left no dump, or\n"
    "an older one, or every rank issued a collective that timed out).\n"
    "Flags take --flag=value or --flag value. An earlier run's per-rank files in DIR and\n"
    "DIR/traces (the <name>_rank<r> names above, gzipped or not), its summary.json and\n"
    "report.html, and those files' temporaries (<file>.tmp, <file>.tmp.<pid>) a run stopped\n"
    "while writing left there are removed first (regular files only; other *.tmp files stay):\n"
    "a run stopped before its end leaves no report of another; other files stay, but one in\n"
    "DIR/traces, which HTA would read as a trace, is refused at the start, named.\n"
    "[profiling] below is titan_train's: profile_run replaces it with the flags above (the job\n"
    "file's is not run, and config.toml records it at its defaults) and refuses --profiling.*\n"
    "flags. Of [checkpoint] it reads initial_load_* only: the job file's other keys are logged\n"
    "as skipped (a value titan_train refuses is refused), and --checkpoint.* flags setting them\n"
    "are refused.\n\n";

// What replaces each of titan_train's [profiling] keys in profile_run.
constexpr std::pair<absl::string_view, absl::string_view> kProfilingReplacements[] = {
    {"enable_profiling", "profile_run always traces"},
    {"save_traces_folder", "use --out"},
    {"profile_freq", "use --profile.warmup + --profile.active"},
    {"enable_memory_snapshot", "profile_run snapshots on a GPU"},
    {"save_memory_snapshot_folder", "use --out"},
    {"profiler_active", "use --profile.active"},
    {"profiler_warmup", "use --profile.warmup"}};

// --profiling.* flags (and --comm.save_traces_folder) would be silently replaced, so they are
// refused, each with its replacement.
absl::Status RefuseProfilingFlags(const std::vector<std::string>& job_args) {
  std::vector<std::string> refused;
  bool comm_folder = false;
  for (const std::string& arg : job_args) {
    absl::string_view key = absl::string_view(arg).substr(0, arg.find('='));
    if (key == "--comm.save_traces_folder") {
      comm_folder = true;
      continue;
    }
    if (!absl::ConsumePrefix(&key, "--profiling.")) continue;
    const bool known =
        titan::JobConfig::Profiling::descriptor()->FindFieldByName(std::string(key)) != nullptr;
    absl::string_view use = known ? "profile_run's flags replace it" : "no such key";
    for (const auto& [name, replacement] : kProfilingReplacements) {
      if (key == name) use = replacement;
    }
    refused.push_back(absl::StrCat("--profiling.", key, " (", use, ")"));
  }
  std::vector<std::string> messages;
  if (!refused.empty()) {
    messages.push_back(absl::StrCat(
        absl::StrJoin(refused, ", "),
        ": profile_run replaces titan_train's [profiling] with its own flags; drop them"));
  }
  if (comm_folder) {
    messages.push_back(
        "--comm.save_traces_folder: profile_run's collective flight recorder dumps into "
        "comm_traces under --out, never the job's folder; drop it");
  }
  if (messages.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(messages, "; "));
}

struct Flags {
  titan::ProfileRunOptions profile;
  std::string analyze_comm_trace;
  std::string comm_trace_prefix = "rank_";
  std::vector<std::string> job_args;  // everything else, for the job config
};

// As titan_train reads an integer key from the command line, with its words.
absl::Status ParseInt(absl::string_view flag, absl::string_view value, int* out) {
  const absl::StatusOr<int32_t> parsed = titan::ParseInt32(value, flag);
  if (!parsed.ok()) return parsed.status();
  *out = *parsed;
  return absl::OkStatus();
}

absl::Status ParseBool(absl::string_view flag, absl::string_view value, bool* out) {
  if (value != "true" && value != "false") {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": expected true or false, got \"", value, "\""));
  }
  *out = value == "true";
  return absl::OkStatus();
}

// profile_run's own flags, as --flag=value or --flag value (a bare --profile.gzip is true, as a
// boolean job key); the rest stays for the job config, which reads both forms too.
absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  constexpr absl::string_view kOwnFlags[] = {
      "--out",          "--profile.warmup",     "--profile.active",
      "--profile.gzip", "--analyze_comm_trace", "--comm_trace_prefix"};
  Flags flags;
  bool prefix_given = false;
  std::string profile_arg;  // the first argument only profiling reads
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    const absl::string_view name = arg.substr(0, eq);
    const bool own =
        std::find(std::begin(kOwnFlags), std::end(kOwnFlags), name) != std::end(kOwnFlags);
    // No job section is called profile: the job config would call it an unknown section.
    if (!own && absl::StartsWith(name, "--profile.")) {
      return absl::InvalidArgumentError(
          absl::StrCat(name,
                       ": unknown key of --profile.*; expected --profile.warmup, --profile.active "
                       "or --profile.gzip"));
    }
    if (!own) {
      flags.job_args.emplace_back(arg);
      if (profile_arg.empty()) profile_arg = std::string(arg);
      continue;
    }
    const bool boolean = name == "--profile.gzip";
    const absl::string_view next = i + 1 < argc ? argv[i + 1] : "--";
    absl::string_view value;
    if (eq != absl::string_view::npos) {
      value = arg.substr(eq + 1);
    } else if (!absl::StartsWith(next, "--") && (!boolean || next == "true" || next == "false")) {
      value = next;
      ++i;
    } else if (boolean) {
      value = "true";
    } else {
      // Refused, not read as empty: "--out --job.config_file=x" must not take the flag as --out.
      return absl::InvalidArgumentError(
          titan::MissingValueError(name, i + 1 == argc ? "" : next, absl::StrCat(name, "=VALUE")));
    }
    absl::Status status;
    if (name == "--out") {
      flags.profile.out = std::string(value);
    } else if (name == "--profile.warmup") {
      status = ParseInt(name, value, &flags.profile.warmup);
    } else if (name == "--profile.active") {
      status = ParseInt(name, value, &flags.profile.active);
    } else if (boolean) {
      status = ParseBool(name, value, &flags.profile.gzip);
    } else if (name == "--analyze_comm_trace") {
      flags.analyze_comm_trace = std::string(value);
    } else {
      flags.comm_trace_prefix = std::string(value);
      prefix_given = true;
    }
    if (!status.ok()) return status;
    if ((name == "--out" || name == "--analyze_comm_trace") && value.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": expected ", name, "=DIR"));
    }
    if (name != "--analyze_comm_trace" && name != "--comm_trace_prefix" && profile_arg.empty()) {
      profile_arg = std::string(name);
    }
  }
  // A flag the chosen mode would not read is refused, not ignored.
  if (!flags.analyze_comm_trace.empty() && !profile_arg.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--analyze_comm_trace takes only --comm_trace_prefix, got ", profile_arg));
  }
  if (flags.analyze_comm_trace.empty() && prefix_given) {
    return absl::InvalidArgumentError("--comm_trace_prefix applies to --analyze_comm_trace only");
  }
  if (flags.analyze_comm_trace.empty()) {
    if (absl::Status status = RefuseProfilingFlags(flags.job_args); !status.ok()) return status;
  }
  return flags;
}

// `exit_status`: comm_trace_analyze's for the verdict.
absl::Status AnalyzeCommTrace(const Flags& flags, int* exit_status) {
  absl::StatusOr<titan::CommTraceVerdict> verdict =
      titan::AnalyzeCommTraces(flags.analyze_comm_trace, flags.comm_trace_prefix);
  if (!verdict.ok()) return verdict.status();
  std::cout << titan::FormatCommTraceVerdict(*verdict) << "\n"
            << titan::FormatCommTraceProgress(*verdict);
  *exit_status = titan::CommTraceExitStatus(*verdict);
  return absl::OkStatus();
}

absl::Status Profile(const Flags& flags) {
  if (absl::Status given = titan::CheckJobGiven(flags.job_args); !given.ok()) return given;
  if (flags.profile.out.empty()) return absl::InvalidArgumentError("--out=DIR is required");
  // Its job is titan_train's: [rl] would be ignored.
  absl::StatusOr<titan::JobConfig> job = titan::ParseJobConfig(
      "", flags.job_args, titan::UnreadSection{"rl", "titan_rl", "profile_run"});
  if (!job.ok()) return job.status();
  if (absl::Status status = titan::CheckCheckpointKeys(*job); !status.ok()) return status;
  // The ranks connect with the profiled job: the flight recorder dumps under --out, not into the
  // job's dump folder.
  const titan::JobConfig config = titan::ProfiledJobConfig(*std::move(job), flags.profile);
  return titan::AsOutFlag(
      titan::RunJobOnThisRank(config, [&](const titan::DistributedRuntime& runtime) {
        return titan::RunProfile(config, runtime, flags.profile);
      }));
}

}  // namespace

int main(int argc, char** argv) {
  // --analyze_comm_trace's verdict, its output lost, is a failure, never read as a verdict.
  titan::CheckStdoutAtExit("profile_run", 1,
                           {titan::kCommTraceMismatch, titan::kCommTraceInconclusive});
  int verdict_status = 0;
  const int status =
      titan::RunRankedTool(argc, argv, "profile_run", kUsage + titan::JobConfigHelp(), [&] {
        absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
        if (!flags.ok()) return flags.status();
        return flags->analyze_comm_trace.empty() ? Profile(*flags)
                                                 : AnalyzeCommTrace(*flags, &verdict_status);
      });
  return status != 0 ? status : verdict_status;
}
