#ifndef TITAN_TOOLS_COMMON_TOOL_FLAGS_H_
#define TITAN_TOOLS_COMMON_TOOL_FLAGS_H_

namespace titan {

// gflags' ParseCommandLineFlags, except that --help (-h, -help, --helpshort) prints `usage` and
// the flags the tool itself defines (tools/...) on stdout and exits 0: gflags' own --help lists
// glog's and gflags' flags first and exits 1. A flag gflags refuses (unknown, a bad value) is
// `<tool>: <message>` on stderr, as the tools' own errors (gflags writes "ERROR: <message>"), and
// exits `usage_error_code`, for a tool whose 1 means something else (checkpoint_inspect: a
// difference); with --json gflags' message is also {"error": ...} on stdout. A non-boolean flag
// given as `--flag VALUE` whose VALUE is a flag ("--output --json") is refused the same way,
// "--output: missing value (...)", where gflags would take the flag as the value; --flag=VALUE
// takes any value.
void ParseToolFlags(const char* usage, int* argc, char*** argv, int usage_error_code = 1);

}  // namespace titan

#endif  // TITAN_TOOLS_COMMON_TOOL_FLAGS_H_
