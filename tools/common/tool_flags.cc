#include "tools/common/tool_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gflags/gflags.h"
#include "tools/common/flag_value.h"
#include "tools/common/tool_output.h"

namespace titan {
namespace {

int g_usage_error_code = 1;
bool g_parsing = false;
std::string g_tool;  // argv[0]'s file name, what the tool's own messages start with.
// gflags' own error is caught here (stderr goes to this file while it parses), to be reworded
// and, in a tool with --json, printed as {"error": ...} too when --json is on; null: not caught.
std::FILE* g_caught_stderr = nullptr;
int g_real_stderr = -1;

// gflags' refusals read "ERROR: <message>"; every titan tool says "<tool>: <message>".
std::string AsToolMessages(const std::string& text) {
  std::string reworded;
  for (absl::string_view line : absl::StrSplit(text, absl::ByChar('\n'))) {
    if (absl::ConsumePrefix(&line, "ERROR: ")) absl::StrAppend(&reworded, g_tool, ": ");
    absl::StrAppend(&reworded, line, "\n");
  }
  reworded.pop_back();  // StrSplit's last piece follows the last newline
  return reworded;
}

// Puts stderr back and writes what gflags printed there, reworded; returns it as printed.
std::string ReleaseStderr() {
  if (g_caught_stderr == nullptr) return "";
  std::fflush(stderr);
  std::string text;
  std::rewind(g_caught_stderr);
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), g_caught_stderr)) > 0;) {
    text.append(buffer, n);
  }
  std::fclose(g_caught_stderr);
  g_caught_stderr = nullptr;
  ::dup2(g_real_stderr, STDERR_FILENO);
  ::close(g_real_stderr);
  std::fputs(AsToolMessages(text).c_str(), stderr);
  return text;
}

// Sends stderr to g_caught_stderr until ReleaseStderr; where that fails, gflags' text stays as is.
void CatchStderr() {
  std::fflush(stderr);
  g_caught_stderr = std::tmpfile();
  g_real_stderr = g_caught_stderr != nullptr ? ::dup(STDERR_FILENO) : -1;
  if (g_real_stderr < 0 || ::dup2(::fileno(g_caught_stderr), STDERR_FILENO) < 0) {
    if (g_caught_stderr != nullptr) std::fclose(g_caught_stderr);
    g_caught_stderr = nullptr;
  }
}

// Whether the tool has a --json flag and the command line set it, in any of gflags' spellings
// (--json=yes, --nojson after it, ...): gflags has parsed every flag before it reports errors.
bool JsonRequested() {
  std::string value;
  return gflags::GetCommandLineOption("json", &value) && value == "true";
}

// gflags exits 1 on a flag it refuses, with no way to ask for another status or format.
void OnParseExit(int status, void*) {
  if (!g_parsing) return;
  const std::string caught = ReleaseStderr();
  if (status == 0) return;
  std::cout.flush();  // --helpfull's text, which gflags prints before it exits 1
  std::fflush(stdout);
  if (!caught.empty() && JsonRequested()) {
    absl::string_view message(caught);
    message = message.substr(0, message.find('\n'));
    absl::ConsumePrefix(&message, "ERROR: ");
    PrintJsonError(message);
    std::fflush(stdout);
  }
  std::_Exit(g_usage_error_code);
}

// Whether `arg` reads as a flag: "--anything", or "-name" for a flag gflags knows ("-json").
bool IsFlag(absl::string_view arg) {
  if (absl::StartsWith(arg, "--")) return true;
  if (!absl::ConsumePrefix(&arg, "-")) return false;
  const std::string name(arg.substr(0, arg.find('=')));
  gflags::CommandLineFlagInfo info;
  return gflags::GetCommandLineFlagInfo(name.c_str(), &info) ||
         (absl::StartsWith(name, "no") &&
          gflags::GetCommandLineFlagInfo(name.substr(2).c_str(), &info) && info.type == "bool");
}

// gflags takes the argument after a non-boolean `--flag` as its value whatever it is: "--output
// --json" would write a file named "--json" with --json unread. Such a flag is refused (its
// message returned; empty: none) and left out of `kept`, argv as gflags then parses it.
std::string FlagsMissingTheirValue(int argc, char** argv, std::vector<char*>* kept) {
  std::string message;
  kept->assign(argv, argv + argc);
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;  // gflags reads no flag past it
    if (arg.find('=') != absl::string_view::npos || !absl::ConsumePrefix(&arg, "-")) continue;
    absl::ConsumePrefix(&arg, "-");
    gflags::CommandLineFlagInfo info;
    if (!gflags::GetCommandLineFlagInfo(std::string(arg).c_str(), &info) || info.type == "bool" ||
        i + 1 == argc) {
      continue;  // gflags' own refusals: unknown, or last with no value at all
    }
    if (!IsFlag(argv[i + 1])) {
      ++i;  // its value
      continue;
    }
    if (message.empty()) {
      message = MissingValueError(argv[i], argv[i + 1], absl::StrCat("--", arg, "=VALUE"));
    }
    kept->erase(std::find(kept->begin(), kept->end(), argv[i]));
  }
  return message;
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
  g_usage_error_code = usage_error_code;
  const std::string program = (*argv)[0];
  g_tool = program.substr(program.find_last_of('/') + 1);
  on_exit(OnParseExit, nullptr);
  std::vector<char*> kept;
  const std::string missing_value = FlagsMissingTheirValue(*argc, *argv, &kept);
  int kept_argc = static_cast<int>(kept.size());
  char** kept_argv = kept.data();
  CatchStderr();
  g_parsing = true;
  // Without the flags missing their values, so that --json after one is read as --json.
  gflags::ParseCommandLineFlags(missing_value.empty() ? argc : &kept_argc,
                                missing_value.empty() ? argv : &kept_argv, /*remove_flags=*/true);
  g_parsing = false;
  ReleaseStderr();
  if (!missing_value.empty()) {
    std::cerr << g_tool << ": " << missing_value << "\n";
    if (JsonRequested()) PrintJsonError(missing_value);
    std::exit(g_usage_error_code);
  }
}

}  // namespace titan
