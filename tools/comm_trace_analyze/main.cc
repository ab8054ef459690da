// comm_trace_analyze FOLDER [--prefix=rank_]
// Reads one job's collective flight-recorder dumps (titan's [comm] save_traces_folder, or c10d's
// TORCH_NCCL_DEBUG_INFO_TEMP_FILE files) and prints, per process group, the first collective that
// not every member issued alike: fr_trace's verdict without Python. Exit status: 0 every group's
// members issued the same collectives, 1 the dumps cannot be read (or are of different runs),
// 2 a group's members disagree (or some came to a collective after the others' timeout),
// 3 inconclusive (a member's dump is missing; it is the suspect); 1 too when the verdict cannot be
// written.

#include <iostream>

#include "gflags/gflags.h"
#include "glog/logging.h"
#include "lib/distributed/comm_trace_analysis.h"
#include "tools/common/tool_flags.h"
#include "tools/common/tool_output.h"

DEFINE_string(prefix, "rank_", "Dump file names: <prefix><rank>");

int main(int argc, char** argv) {
  // A verdict whose output is lost is a failure, never read as a verdict.
  titan::CheckStdoutAtExit("comm_trace_analyze", 1,
                           {titan::kCommTraceMismatch, titan::kCommTraceInconclusive});
  titan::ParseToolFlags(
      "comm_trace_analyze FOLDER [--prefix=rank_]\n"
      "Exit status: 0 every group's members issued the same collectives; 1 the dumps cannot be "
      "read, or come from different runs, or the verdict cannot be written; 2 a group's members "
      "disagree (a collective some never issued, issued differently, or issued only after the "
      "others' timeout); 3 inconclusive: no "
      "disagreement found, but some ranks left no dump (the suspects), or a collective every "
      "member issued stayed open past its timeout (a member stalled inside it, or the network)",
      &argc, &argv);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  if (argc != 2) {
    std::cerr << "comm_trace_analyze: expected one FOLDER, got " << argc - 1 << " (see --help)\n";
    return 1;
  }
  absl::StatusOr<titan::CommTraceVerdict> verdict = titan::AnalyzeCommTraces(argv[1], FLAGS_prefix);
  if (!verdict.ok()) {
    std::cerr << "comm_trace_analyze: " << verdict.status().message() << "\n";
    return 1;
  }
  std::cout << titan::FormatCommTraceVerdict(*verdict);
  return titan::CommTraceExitStatus(*verdict);
}
