// A stand-in for titan_rl --json in launcher tests: RunRankedTool with rank 0's stdout passed
// through as is and failures told on stdout as a JSON line; each run prints {"rank": R} there.
#include <cstdlib>
#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lib/distributed/launcher.h"
#include "tools/common/tool_output.h"

int main(int argc, char** argv) {
  titan::CheckStdoutAtExit("ranked_tool");
  titan::LaunchOptions launch;
  launch.plain_stdout_rank = 0;
  launch.report_failure = [](absl::string_view message) { titan::PrintJsonError(message); };
  return titan::RunRankedTool(
      argc, argv, "ranked_tool", "usage: ranked_tool [--nproc_per_node=N]\n",
      [] {
        const char* rank = std::getenv("RANK");
        std::cout << "{\"rank\": " << (rank == nullptr ? "0" : rank) << "}\n";
        return absl::OkStatus();
      },
      launch);
}
