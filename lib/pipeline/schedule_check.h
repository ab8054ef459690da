#ifndef TITAN_LIB_PIPELINE_SCHEDULE_CHECK_H_
#define TITAN_LIB_PIPELINE_SCHEDULE_CHECK_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/pipeline/schedule.h"

namespace titan {

// How long each kind of action takes in a simulation (time units).
struct ActionCosts {
  double forward = 1;
  double backward = 1;  // B
  double backward_input = 1;
  double backward_weight = 1;
};

// A schedule played out in time: when each rank runs each of its actions, every action starting
// as soon as its rank is free and what it needs has finished (the previous stage's forward; the
// next stage's input gradient; its own forward or I).
struct ScheduleTimeline {
  struct Slot {
    PipelineAction action;
    double start = 0;
    double end = 0;
  };
  std::vector<std::vector<Slot>> ranks;  // each rank's actions in order
  double makespan = 0;

  // Mean over ranks of the time a rank is not computing before the last action ends.
  double IdleFraction() const;
};

// Checks that `schedule` can run on `num_stages` stages of `microbatches` microbatches, stage s on
// rank `rank_of_stage(s)`: each rank runs only its stages; every stage runs each microbatch's
// forward once and either one full backward or one I followed by one W; and played out it cannot
// deadlock (some action never becomes ready). Errors name the first offending action.
absl::StatusOr<ScheduleTimeline> SimulateSchedule(const PipelineSchedule& schedule, int num_stages,
                                                  int microbatches,
                                                  const std::function<int(int)>& rank_of_stage,
                                                  const ActionCosts& costs = {});

// The same timeline for any placed schedule, without SimulateSchedule's check that every
// microbatch runs forward and backward once: forward-only (evaluation) schedules play too.
absl::StatusOr<ScheduleTimeline> PlaySchedule(const PipelineSchedule& schedule, int num_stages,
                                              int microbatches,
                                              const std::function<int(int)>& rank_of_stage,
                                              const ActionCosts& costs = {});

// The timeline as a table, one row per time step and one column per rank (PyTorch's
// _format_pipeline_order), for unit costs; an empty cell is a rank waiting.
std::string FormatScheduleTable(const ScheduleTimeline& timeline);

// PyTorch's compute-only CSV (Schedule._dump_csv / _load_csv): one line per rank, its actions
// comma-separated ("0F0,0F1,0B0,..."); empty cells and blank lines are allowed and skipped (an
// error names the line of `text`, blank lines counted).
absl::StatusOr<PipelineSchedule> ParseScheduleCsv(absl::string_view text);
std::string ScheduleToCsv(const PipelineSchedule& schedule);

}  // namespace titan

#endif  // TITAN_LIB_PIPELINE_SCHEDULE_CHECK_H_
