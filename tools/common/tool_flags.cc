#include "tools/common/tool_flags.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gflags/gflags.h"

namespace titan {
namespace {

void PrintHelp(const char* usage) {
  std::vector<gflags::CommandLineFlagInfo> flags;
  gflags::GetAllFlags(&flags);  // sorted by file, then name
  std::printf("%s\n\nFlags:\n", usage);
  for (const gflags::CommandLineFlagInfo& flag : flags) {
    if (flag.filename.rfind("tools/", 0) != 0) continue;  // glog's and gflags' own
    std::printf("  --%s (%s) default: %s\n", flag.name.c_str(), flag.description.c_str(),
                flag.type == "string" ? ("\"" + flag.default_value + "\"").c_str()
                                      : flag.default_value.c_str());
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
