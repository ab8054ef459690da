#ifndef TITAN_LIB_DISTRIBUTED_LAUNCHER_H_
#define TITAN_LIB_DISTRIBUTED_LAUNCHER_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/distributed/distributed_env.h"

namespace titan {

struct LaunchOptions {
  // How long the other ranks get to exit after a rank failed before SIGKILL: torchrun's 30 s, which
  // outlasts a survivor's wait for a dead rank's trace dump (comm_trace.h), so its error is said.
  absl::Duration grace_period = absl::Seconds(30);
  // The rank whose stdout passes through without the "[rank N] " prefix (-1: none), for a tool
  // whose rank 0 alone prints machine-readable output (titan_rl --json).
  int plain_stdout_rank = -1;
  // Told the job's failure in one line when plain_stdout_rank printed nothing on stdout (it was
  // stopped after another rank failed, or the launch itself failed), so that a --json caller
  // still gets its one error line there; not when stdout itself was lost, where it would write.
  std::function<void(absl::string_view message)> report_failure;
  // Ranks' stderr lines starting with this ("titan_train: ", a failure) are held back and printed
  // last, once each, naming every rank that printed it ("[ranks 0-7] titan_train: ..."): one
  // refused config is said once, not once per rank. Empty: passed through as they come.
  std::string failure_line_prefix;
};

// Runs `nproc` copies of this executable (/proc/self/exe) on this host, like torchrun standalone:
// argv without --nproc_per_node, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT set (a free MASTER_PORT when none is given), every output line prefixed with
// "[rank N] " (but options.plain_stdout_rank's stdout; failure lines are gathered, see
// LaunchOptions::failure_line_prefix), SIGINT/SIGTERM/SIGUSR1/SIGQUIT forwarded and SIGHUP as
// SIGTERM (a second SIGINT/SIGTERM/SIGHUP kills the ranks, as does the grace period after SIGQUIT;
// a rank starts with SIGUSR1 ignored, see dump_signal.h). When a rank fails (exits non-zero, not of
// a signal the launcher sent it) the others get SIGTERM (unless a forwarded stop signal is stopping
// them already), then SIGKILL after the grace period. Returns the first failing rank's exit status
// (128+signal when killed), else 128+signal when a rank died of a signal the launcher sent it, else
// an error when passing the ranks' output to stdout failed (the output is lost), else 0.
absl::StatusOr<int> LaunchLocalRanks(int nproc, int argc, char** argv,
                                     const LaunchOptions& options = LaunchOptions());

// The value of a --nproc_per_node=N (or --nproc_per_node N) argument, 0 when absent; an error for
// anything but a positive integer (a bare --nproc_per_node last included), past 8 ranks per CPU
// core of this machine, and for the flag given twice. LaunchLocalRanks drops the flag, in exactly
// these spellings, for the ranks.
absl::StatusOr<int> NprocPerNodeFlag(int argc, char** argv);

// The main() of a tool that may start its own ranks (titan_train, titan_rl): --help or -h prints
// `help`; logs go to stderr; under `bazel run` relative paths mean the user's directory;
// --nproc_per_node=N launches N local ranks of this binary (LaunchLocalRanks with `launch`), else
// `run` runs here. A failure prints "<name>: <message>" on stderr (and, before or around the ranks,
// goes to launch.report_failure as LaunchLocalRanks tells it); the ranks' such lines are gathered
// (failure_line_prefix
// "<name>: "). Returns the process's exit code.
int RunRankedTool(int argc, char** argv, const std::string& name, const std::string& help,
                  const std::function<absl::Status()>& run,
                  const LaunchOptions& launch = LaunchOptions());

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_LAUNCHER_H_
