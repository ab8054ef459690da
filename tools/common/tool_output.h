#ifndef TITAN_TOOLS_COMMON_TOOL_OUTPUT_H_
#define TITAN_TOOLS_COMMON_TOOL_OUTPUT_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace titan {

// Makes a lost stdout an error, as coreutils' close_stdout: at exit (a return from main() or
// exit(), --help's too) stdout is flushed, and if a write to it failed (std::cout or stdio) the
// tool prints "<tool>: stdout: write failed: <reason>" on stderr and exits `failure_code` where
// it would have exited 0 or with one of `verdicts` (answers, such as "differs", that the lost
// output carried), else keeps its own failing status. Call it first in main(). The reason of a
// write that failed before exit is known through std::cout only: tools print with it. It also
// ignores SIGXFSZ, so that a write past `ulimit -f` (stdout's or an output file's) fails with
// EFBIG, which the tool reports and cleans up after as after a full disk, instead of killing the
// tool mid-write. SIGPIPE is ignored for the same reason (a reader gone, `| head -1`, must not
// kill a tool mid-write: writes to it fail harmlessly): a stdout lost that way ends the tool at
// exit by SIGPIPE instead of the line above, silently (status 141), as its default action would
// have but once the tool's work is done or cleaned up after.
void CheckStdoutAtExit(const char* tool, int failure_code = 1,
                       std::initializer_list<int> verdicts = {});

// Flushes stdout now: OK, or "stdout: write failed: <reason>" when a write to it failed, for a
// tool whose output must reach its reader before it commits (convert_checkpoint --json's summary
// before OUT is put in place). CheckStdoutAtExit's check at exit still reports it.
absl::Status FlushStdout();

// Prints {"error": message} as one JSON line on stdout: a --json tool's failure, for the script
// that parses its output (bytes that are not UTF-8 become U+FFFD).
void PrintJsonError(absl::string_view message);

}  // namespace titan

#endif  // TITAN_TOOLS_COMMON_TOOL_OUTPUT_H_
