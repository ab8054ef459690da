#include "tools/common/tool_flags.h"

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "gflags/gflags.h"

namespace titan {
namespace {

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

void ParseToolFlags(const char* usage, int* argc, char*** argv) {
  gflags::SetUsageMessage(usage);
  for (int i = 1; i < *argc; ++i) {
    const std::string arg = (*argv)[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h" || arg == "-help" || arg == "--helpshort") {
      PrintHelp(usage);
      std::exit(0);
    }
  }
  gflags::ParseCommandLineFlags(argc, argv, /*remove_flags=*/true);
}

}  // namespace titan
