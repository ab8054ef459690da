// checkpoint_inspect PATH [--stats] [--verify] [--diff=OTHER [--rtol --atol]] [--json]
// Lists a titan, Hugging Face or Meta checkpoint's model (family, flavor or "custom", architecture)
// and tensors. Exits as diff(1) and cmp do: 0 when all is well, 1 when --verify finds a problem (a
// damaged titan file is one, --verify or not) or --diff a difference, 2 on trouble (a checkpoint it
// cannot read, a bad flag, lost output).

#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gflags/gflags.h"
#include "glog/logging.h"
#include "lib/interop/inspect.h"
#include "lib/util/short_text.h"
#include "nlohmann/json.hpp"
#include "tools/common/tool_flags.h"
#include "tools/common/tool_output.h"

DEFINE_bool(stats, false,
            "Per-tensor NaN and Inf counts, and min, max, mean, std over the finite values (std "
            "as torch.std: divided by n - 1)");
DEFINE_bool(verify, false,
            "Integrity: sizes and CRC-32 against a titan manifest; index and headers for hf");
DEFINE_string(diff, "",
              "Compare every tensor with this checkpoint: |a - b| > atol + rtol * |b| differs, "
              "NaN or inf against another value is counted apart, and a dtype mismatch differs "
              "whatever the tolerances (as torch.testing.assert_close)");
DEFINE_double(rtol, 0, "--diff: relative tolerance (>= 0)");
DEFINE_double(atol, 0, "--diff: absolute tolerance (>= 0)");
DEFINE_bool(json, false, "Print JSON instead of text");

namespace {

// diff(1)'s exit statuses: a script tells "they differ" from "could not compare".
constexpr int kFound = 1;
constexpr int kTrouble = 2;

constexpr char kUsage[] =
    "checkpoint_inspect PATH [--stats] [--verify] [--diff=OTHER [--rtol=R --atol=A]] [--json]\n"
    "Exit status: 0 all is well, 1 --verify found a problem (a damaged file: found without it\n"
    "too) or --diff a difference, 2 trouble\n"
    "(a checkpoint it cannot read, a bad flag, output it cannot write), as diff(1)";

}  // namespace

int main(int argc, char** argv) {
  titan::CheckStdoutAtExit("checkpoint_inspect", kTrouble, {kFound});
  titan::ParseToolFlags(kUsage, &argc, &argv, kTrouble);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  // With --json a failure is also a JSON object on stdout, for the script parsing it.
  const auto fail = [](const std::string& message) {
    std::cerr << "checkpoint_inspect: " << message << "\n";
    if (FLAGS_json) titan::PrintJsonError(message);
    return kTrouble;
  };
  if (argc != 2) {
    return fail(absl::StrCat("expected one PATH, got ", argc - 1, " (see --help)"));
  }
  // An unset shell variable ("$DIR", --diff="$OTHER") must not read as "identical".
  if (argv[1][0] == '\0') return fail("expected a checkpoint path, got an empty one");
  if (FLAGS_diff.empty() && !gflags::GetCommandLineFlagInfoOrDie("diff").is_default) {
    return fail("--diff: expected a checkpoint path, got an empty one");
  }
  for (const char* flag : {"rtol", "atol"}) {
    if (FLAGS_diff.empty() && !gflags::GetCommandLineFlagInfoOrDie(flag).is_default) {
      return fail(absl::StrCat("--", flag, " applies to --diff only"));
    }
  }
  titan::InspectOptions options;
  options.stats = FLAGS_stats;
  options.verify = FLAGS_verify;
  absl::StatusOr<titan::InspectReport> report = titan::InspectCheckpoint(argv[1], options);
  if (!report.ok()) return fail(std::string(report.status().message()));
  nlohmann::json json = titan::InspectReportToJson(*report);
  std::string text = titan::FormatInspectReport(*report);
  // A damaged file is a problem found, --verify or not.
  bool failed = !report->damaged.empty() || (report->verified && !report->problems.empty());
  if (!FLAGS_diff.empty()) {
    absl::StatusOr<titan::DiffReport> diff =
        titan::DiffCheckpoints(argv[1], FLAGS_diff, FLAGS_rtol, FLAGS_atol, FLAGS_verify);
    if (!diff.ok()) return fail(std::string(diff.status().message()));
    json["diff"] = titan::DiffReportToJson(*diff);
    absl::StrAppend(&text, "diff against ", FLAGS_diff, ": ", titan::FormatDiffReport(*diff));
    failed = failed || !diff->within_tolerance();
  }
  std::cout << (FLAGS_json ? titan::JsonText(json, 2) + "\n" : text);
  return failed ? kFound : 0;
}
