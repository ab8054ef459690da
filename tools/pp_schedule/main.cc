// pp_schedule --schedule=NAME --pp=N --microbatches=M [--stages_per_rank=V] [--csv=FILE]
//             [--format=table|csv]
// Prints a pipeline schedule as titan_train runs it: the table of actions by time step and rank
// (each action one time unit; an empty cell is a rank waiting for another stage) and the idle
// fraction it implies with unit costs and with a backward twice a forward (F 1, B 2, I 1, W 1);
// or, with --format=csv, each rank's actions (PyTorch's compute-only CSV, what
// [parallelism] pipeline_parallel_schedule_csv reads). Exits 1 on a schedule that cannot run, and
// on counts too large to simulate (--pp over 1024, --pp x stages per rank x --microbatches over
// 2^20).

#include <cstdint>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gflags/gflags.h"
#include "lib/pipeline/schedule.h"
#include "lib/pipeline/schedule_check.h"
#include "lib/util/file_util.h"
#include "lib/util/status_context.h"
#include "tools/common/tool_flags.h"
#include "tools/common/tool_output.h"

DEFINE_string(schedule, "1F1B",
              "GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble or "
              "DualPipeV (placement and stages per rank follow it)");
DEFINE_int32(pp, 2, "Pipeline ranks, 1 to 1024");
DEFINE_int32(microbatches, 4,
             "Microbatches per schedule run (at most 2^20 stage-microbatch pairs in all)");
DEFINE_int32(stages_per_rank, 0,
             "Stages per rank, 0 or more; 0: 1 for single-stage schedules, else 2");
DEFINE_string(csv, "", "Read the actions from this CSV instead (placement from --schedule)");
DEFINE_string(format, "table", "table or csv");

namespace {

int Fail(const absl::Status& status) {
  std::cerr << "pp_schedule: " << status.message() << "\n";
  return 1;
}

// The simulation keeps a cell per (stage, microbatch) and prints a line per time step: past a
// million cells the table is too long to read and the memory runs to gigabytes.
constexpr int64_t kMaxCells = int64_t{1} << 20;
// A column per rank: real pipelines have tens of stages, and a wider table is unreadable.
constexpr int kMaxPp = 1024;

// Refuses counts the simulation cannot hold before anything is allocated for them.
absl::Status CheckCounts(int pp, int stages_per_rank, int microbatches) {
  if (pp < 1 || pp > kMaxPp) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pp: expected 1 to ", kMaxPp, " ranks, got ", pp));
  }
  if (microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--microbatches: expected a positive count, got ", microbatches));
  }
  const int64_t stages = int64_t{pp} * stages_per_rank;  // At most 2^10 x 2^31: no overflow.
  if (stages > kMaxCells || stages * microbatches > kMaxCells) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pp x stages per rank x --microbatches: expected at most ", kMaxCells,
        " (stage, microbatch) pairs, got ", pp, " x ", stages_per_rank, " x ", microbatches));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  titan::CheckStdoutAtExit("pp_schedule");
  titan::ParseToolFlags("pp_schedule --schedule=NAME --pp=N --microbatches=M (see --help)", &argc,
                        &argv);
  if (argc > 1) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", argv[1], "\"; flags are --name=value")));
  }
  if (FLAGS_format != "table" && FLAGS_format != "csv") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--format: expected table or csv, got \"", FLAGS_format, "\"")));
  }
  if (FLAGS_stages_per_rank < 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--stages_per_rank: expected 0 (the schedule's default) or more, got ",
                     FLAGS_stages_per_rank)));
  }
  absl::StatusOr<titan::ScheduleKind> kind = titan::FindScheduleKind(FLAGS_schedule);
  if (!kind.ok()) return Fail(titan::WithContext(kind.status(), "--schedule"));
  const int per_rank =
      FLAGS_stages_per_rank > 0 ? FLAGS_stages_per_rank : (kind->multi_stage ? 2 : 1);
  if (absl::Status counts = CheckCounts(FLAGS_pp, per_rank, FLAGS_microbatches); !counts.ok()) {
    return Fail(counts);
  }
  absl::StatusOr<titan::PipelineSchedule> schedule;
  if (FLAGS_csv.empty()) {
    schedule = titan::BuildSchedule(*kind, FLAGS_pp, per_rank, FLAGS_microbatches);
  } else {
    absl::StatusOr<std::string> text = titan::ReadFile(FLAGS_csv);
    if (!text.ok()) return Fail(text.status());
    schedule = titan::ParseScheduleCsv(*text);
    if (!schedule.ok()) {
      return Fail(
          absl::InvalidArgumentError(absl::StrCat(FLAGS_csv, ": ", schedule.status().message())));
    }
  }
  if (!schedule.ok()) return Fail(schedule.status());
  auto rank_of = [&](int stage) {
    return titan::RankOfStage(kind->placement, FLAGS_pp, per_rank, stage);
  };
  const int stages = FLAGS_pp * per_rank;
  absl::StatusOr<titan::ScheduleTimeline> unit =
      titan::SimulateSchedule(*schedule, stages, FLAGS_microbatches, rank_of);
  if (!unit.ok()) return Fail(unit.status());
  if (FLAGS_format == "csv") {
    std::cout << titan::ScheduleToCsv(*schedule);
    return 0;
  }
  titan::ActionCosts weighted;
  weighted.backward = 2;
  const absl::StatusOr<titan::ScheduleTimeline> timed =
      titan::SimulateSchedule(*schedule, stages, FLAGS_microbatches, rank_of, weighted);
  std::cout << absl::StrFormat("%s: %d ranks, %d stages, %d microbatches\n", kind->name, FLAGS_pp,
                               stages, FLAGS_microbatches)
            << titan::FormatScheduleTable(*unit)
            << absl::StrFormat(
                   "idle fraction: %.4f with unit costs, %.4f with F 1, B 2, I 1, W 1 (makespan "
                   "%.0f)\n",
                   unit->IdleFraction(), timed->IdleFraction(), timed->makespan);
  return 0;
}
