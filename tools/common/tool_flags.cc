#include "tools/common/tool_flags.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "gflags/gflags.h"

namespace titan {
namespace {

int g_usage_error_code = 1;
bool g_parsing = false;

// gflags exits 1 on a flag it refuses, with no way to ask for another status.
void RemapParseExit(int status, void*) {
  if (!g_parsing || status == 0) return;
  std::cout.flush();  // --helpfull's text, which gflags prints before it exits 1
  std::fflush(stdout);
  std::_Exit(g_usage_error_code);
}

void PrintHelp(const char* usage) {
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);  // sorted by file, then name
  std::cout << usage << "\n\nFlags:\n";
  for (const gflags::CommandLineFlagInfo& flag : flags) {
    if (flag.filename.rfind("tools/", 0) != 0) continue;  // glog's and gflags' own
    std::cout << "  --" << flag.name << " (" << flag.description << ") default: "
              << (flag.type == "string" ? "\"" + flag.default_value + "\"" : flag.default_value)
              << "\n";
  }
}

}  // namespace

void ParseToolFlags(const char* usage, int* argc, char*** argv, int usage_error_code) {
  gflags::SetUsageMessage(usage);
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = (*argv)[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h" || arg == "-help" || arg == "--helpshort") {
      PrintHelp(usage);
      std::exit(0);
    }
  }
  if (usage_error_code != 1) {
    g_usage_error_code = usage_error_code;
    on_exit(RemapParseExit, nullptr);
  }
  g_parsing = true;
  gflags::ParseCommandLineFlags(argc, argv, /*remove_flags=*/true);
  g_parsing = false;
}

}  // namespace titan
