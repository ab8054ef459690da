#include "lib/pipeline/schedule_check.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// When each part of one stage's microbatch finished in the simulation (unset: not yet).
struct Progress {
  std::optional<double> forward;
  std::optional<double> input_grad;  // B or I
  std::optional<double> weight_grad;  // B or W
  int forwards = 0, backwards = 0, inputs = 0, weights = 0;
};

double Cost(const ActionCosts& costs, PipelineOp op) {
  switch (op) {
    case PipelineOp::kForward:
      return costs.forward;
    case PipelineOp::kBackward:
      return costs.backward;
    case PipelineOp::kBackwardInput:
      return costs.backward_input;
    case PipelineOp::kBackwardWeight:
      return costs.backward_weight;
  }
  return 0;
}

}  // namespace

double ScheduleTimeline::IdleFraction() const {
  if (ranks.empty() || makespan <= 0) return 0;
  double idle = 0;
  for (const auto& slots : ranks) {
    double busy = 0;
    for (const Slot& slot : slots) busy += slot.end - slot.start;
    idle += (makespan - busy) / makespan;
  }
  return idle / static_cast<double>(ranks.size());
}

namespace {

// Each action is within the stages and microbatches, on the rank that holds its stage.
absl::Status CheckPlacement(const PipelineSchedule& schedule, int num_stages, int microbatches,
                            const std::function<int(int)>& rank_of_stage) {
  for (size_t r = 0; r < schedule.size(); ++r) {
    for (const PipelineAction& a : schedule[r]) {
      if (a.stage < 0 || a.stage >= num_stages || a.microbatch < 0 ||
          a.microbatch >= microbatches) {
        return absl::InvalidArgumentError(
            absl::StrCat("pipeline schedule: rank ", r, " runs ", ActionName(a), ", outside ",
                         num_stages, " stages × ", microbatches, " microbatches"));
      }
      if (rank_of_stage(a.stage) != static_cast<int>(r)) {
        return absl::InvalidArgumentError(
            absl::StrCat("pipeline schedule: rank ", r, " runs ", ActionName(a), ", but stage ",
                         a.stage, " is on rank ", rank_of_stage(a.stage)));
      }
    }
  }
  return absl::OkStatus();
}

// The timeline of a placed schedule, or the deadlock that stops it.
absl::StatusOr<ScheduleTimeline> Play(const PipelineSchedule& schedule, int num_stages,
                                      int microbatches, const ActionCosts& costs) {
  std::vector<Progress> progress(static_cast<size_t>(num_stages) * microbatches);
  auto at = [&](int stage, int microbatch) -> Progress& {
    return progress[static_cast<size_t>(stage) * microbatches + microbatch];
  };
  ScheduleTimeline timeline;
  timeline.ranks.resize(schedule.size());
  std::vector<double> free_at(schedule.size(), 0);
  size_t remaining = 0;
  for (const auto& ops : schedule) remaining += ops.size();
  while (remaining > 0) {
    bool progressed = false;
    for (size_t r = 0; r < schedule.size(); ++r) {
      auto& slots = timeline.ranks[r];
      while (slots.size() < schedule[r].size()) {
        const PipelineAction& a = schedule[r][slots.size()];
        Progress& p = at(a.stage, a.microbatch);
        std::vector<std::optional<double>> needs;
        if (a.op == PipelineOp::kForward) {
          if (a.stage > 0) needs.push_back(at(a.stage - 1, a.microbatch).forward);
        } else if (a.op == PipelineOp::kBackwardWeight) {
          needs.push_back(p.input_grad);
        } else {
          needs.push_back(p.forward);
          if (a.stage + 1 < num_stages) needs.push_back(at(a.stage + 1, a.microbatch).input_grad);
        }
        double ready = free_at[r];
        bool blocked = false;
        for (const auto& end : needs) {
          if (!end) blocked = true;
          if (end) ready = std::max(ready, *end);
        }
        if (blocked) break;
        const double end = ready + Cost(costs, a.op);
        slots.push_back({a, ready, end});
        free_at[r] = end;
        if (a.op == PipelineOp::kForward) p.forward = end;
        if (a.op == PipelineOp::kBackward || a.op == PipelineOp::kBackwardInput) p.input_grad = end;
        if (a.op == PipelineOp::kBackward || a.op == PipelineOp::kBackwardWeight) {
          p.weight_grad = end;
        }
        timeline.makespan = std::max(timeline.makespan, end);
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      std::vector<std::string> stuck;
      for (size_t r = 0; r < schedule.size(); ++r) {
        const size_t next = timeline.ranks[r].size();
        if (next < schedule[r].size()) {
          stuck.push_back(absl::StrCat("rank ", r, " at ", ActionName(schedule[r][next])));
        }
      }
      return absl::InvalidArgumentError(
          absl::StrCat("pipeline schedule deadlocks: every rank waits for an action that never "
                       "runs (",
                       absl::StrJoin(stuck, ", "), ")"));
    }
  }
  return timeline;
}
}  // namespace

absl::StatusOr<ScheduleTimeline> SimulateSchedule(const PipelineSchedule& schedule, int num_stages,
                                                  int microbatches,
                                                  const std::function<int(int)>& rank_of_stage,
                                                  const ActionCosts& costs) {
  TITAN_RETURN_IF_ERROR(CheckPlacement(schedule, num_stages, microbatches, rank_of_stage));
  std::vector<Progress> counts(static_cast<size_t>(num_stages) * microbatches);
  for (const auto& ops : schedule) {
    for (const PipelineAction& a : ops) {
      Progress& p = counts[static_cast<size_t>(a.stage) * microbatches + a.microbatch];
      ++(a.op == PipelineOp::kForward         ? p.forwards
         : a.op == PipelineOp::kBackward      ? p.backwards
         : a.op == PipelineOp::kBackwardInput ? p.inputs
                                              : p.weights);
    }
  }
  for (int s = 0; s < num_stages; ++s) {
    for (int m = 0; m < microbatches; ++m) {
      const Progress& p = counts[static_cast<size_t>(s) * microbatches + m];
      const bool split = p.backwards == 0 && p.inputs == 1 && p.weights == 1;
      const bool whole = p.backwards == 1 && p.inputs == 0 && p.weights == 0;
      if (p.forwards != 1 || !(split || whole)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "pipeline schedule: stage %d microbatch %d runs F %d, B %d, I %d, W %d times; "
            "expected F once and either B once or I and W once each",
            s, m, p.forwards, p.backwards, p.inputs, p.weights));
      }
    }
  }
  return Play(schedule, num_stages, microbatches, costs);
}

absl::StatusOr<ScheduleTimeline> PlaySchedule(const PipelineSchedule& schedule, int num_stages,
                                              int microbatches,
                                              const std::function<int(int)>& rank_of_stage,
                                              const ActionCosts& costs) {
  TITAN_RETURN_IF_ERROR(CheckPlacement(schedule, num_stages, microbatches, rank_of_stage));
  return Play(schedule, num_stages, microbatches, costs);
}

std::string FormatScheduleTable(const ScheduleTimeline& timeline) {
  const int steps = static_cast<int>(std::lround(timeline.makespan));
  const int ranks = static_cast<int>(timeline.ranks.size());
  std::vector<std::vector<std::string>> cells(steps, std::vector<std::string>(ranks));
  std::vector<int> width(ranks);
  for (int r = 0; r < ranks; ++r) {
    width[r] = static_cast<int>(absl::StrCat("Rank ", r).size());
    for (const auto& slot : timeline.ranks[r]) {
      const std::string name = ActionName(slot.action);
      const int end = std::min<int>(steps, std::lround(slot.end));
      for (int t = static_cast<int>(std::lround(slot.start)); t < end; ++t) cells[t][r] = name;
      width[r] = std::max(width[r], static_cast<int>(name.size()));
    }
  }
  const int digits = static_cast<int>(absl::StrCat(std::max(0, steps - 1)).size());
  auto row = [&](const std::string& label, const std::vector<std::string>& items) {
    std::string line = label;
    for (int r = 0; r < ranks; ++r) absl::StrAppendFormat(&line, "%-*s ", width[r], items[r]);
    return absl::StrCat(absl::StripTrailingAsciiWhitespace(line), "\n");
  };
  std::vector<std::string> header(ranks);
  for (int r = 0; r < ranks; ++r) header[r] = absl::StrCat("Rank ", r);
  std::string table = row(std::string(digits + 7, ' '), header);
  for (int t = 0; t < steps; ++t) {
    absl::StrAppend(&table, row(absl::StrFormat("Step %0*d: ", digits, t), cells[t]));
  }
  return table;
}

absl::StatusOr<PipelineSchedule> ParseScheduleCsv(absl::string_view text) {
  PipelineSchedule schedule;
  int line_number = 0;  // The file's, counting the blank lines that name no rank.
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty()) continue;
    std::vector<PipelineAction> ops;
    for (absl::string_view cell : absl::StrSplit(line, ',')) {
      if (absl::StripAsciiWhitespace(cell).empty()) continue;
      absl::StatusOr<PipelineAction> action = ParseAction(cell);
      if (!action.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "line ", line_number, " (rank ", schedule.size(), "): ", action.status().message()));
      }
      ops.push_back(*action);
    }
    schedule.push_back(std::move(ops));
  }
  return schedule;
}

std::string ScheduleToCsv(const PipelineSchedule& schedule) {
  std::string csv;
  for (const auto& ops : schedule) {
    absl::StrAppend(&csv,
                    absl::StrJoin(ops, ",",
                                  [](std::string* out, const PipelineAction& a) {
                                    absl::StrAppend(out, ActionName(a));
                                  }),
                    "\n");
  }
  return csv;
}

}  // namespace titan
