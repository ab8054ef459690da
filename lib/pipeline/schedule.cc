#include "lib/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace titan {
namespace {

constexpr char kOpLetters[] = {'F', 'B', 'I', 'W'};

// Appends actions while counting microbatches per (stage, op), as PyTorch's schedules number them.
class RankOps {
 public:
  explicit RankOps(std::vector<PipelineAction>& out) : out_(out) {}
  // The next microbatch of `stage` for `op`; a full backward counts as I and W together.
  void Add(int stage, PipelineOp op) {
    const PipelineOp counter = op == PipelineOp::kBackward ? PipelineOp::kBackwardInput : op;
    const int microbatch = next_[{stage, counter}]++;
    if (op == PipelineOp::kBackward) ++next_[{stage, PipelineOp::kBackwardWeight}];
    out_.push_back({op, stage, microbatch});
  }
  int count(int stage, PipelineOp op) { return next_[{stage, op}]; }

 private:
  std::vector<PipelineAction>& out_;
  std::map<std::pair<int, PipelineOp>, int> next_;
};

std::vector<PipelineAction> GPipeRank(int rank, int microbatches) {
  std::vector<PipelineAction> ops;
  for (int m = 0; m < microbatches; ++m) ops.push_back({PipelineOp::kForward, rank, m});
  for (int m = 0; m < microbatches; ++m) ops.push_back({PipelineOp::kBackward, rank, m});
  return ops;
}

// As PyTorch's Schedule1F1B runs it: pp - rank forwards, then backward and forward alternate,
// then the remaining backwards.
std::vector<PipelineAction> OneFOneBRank(int rank, int pp, int microbatches) {
  std::vector<PipelineAction> ops;
  const int warmup = std::min(microbatches, pp - rank);
  int forward = 0;
  for (; forward < warmup; ++forward) ops.push_back({PipelineOp::kForward, rank, forward});
  for (int backward = 0; backward < microbatches; ++backward) {
    ops.push_back({PipelineOp::kBackward, rank, backward});
    if (forward < microbatches) ops.push_back({PipelineOp::kForward, rank, forward++});
  }
  return ops;
}

std::vector<PipelineAction> LoopedBfsRank(int rank, int pp, int stages_per_rank,
                                          int microbatches) {
  std::vector<PipelineAction> ops;
  for (int local = 0; local < stages_per_rank; ++local) {
    for (int m = 0; m < microbatches; ++m) {
      ops.push_back({PipelineOp::kForward, rank + local * pp, m});
    }
  }
  for (int local = stages_per_rank - 1; local >= 0; --local) {
    for (int m = microbatches - 1; m >= 0; --m) {
      ops.push_back({PipelineOp::kBackward, rank + local * pp, m});
    }
  }
  return ops;
}

// PyTorch's _get_1f1b_rank_ops for Interleaved1F1B and (with `zero_bubble`) InterleavedZeroBubble:
// warmup forwards, then one forward and one backward per step, then the remaining backwards;
// stages take turns in rounds of `per_round` microbatches. Zero bubble splits each backward into
// I and a W that trails it by `rank` backwards.
std::vector<PipelineAction> InterleavedRank(int rank, int pp, int stages_per_rank,
                                            int microbatches, bool zero_bubble) {
  const int rounds = std::max(1, microbatches / pp);
  const int per_round = microbatches / rounds;
  const int warmup =
      std::min((stages_per_rank - 1) * per_round + (zero_bubble ? 1 : 2) * (pp - 1 - rank),
               microbatches * stages_per_rank);
  const int microbatch_ops = stages_per_rank * microbatches;
  const int total = microbatch_ops + warmup;
  auto forward_stage = [&](int step) {
    return ((step / per_round) % stages_per_rank) * pp + rank;
  };
  auto backward_stage = [&](int step) {
    return (stages_per_rank - 1 - ((step - warmup) / per_round) % stages_per_rank) * pp + rank;
  };
  const PipelineOp backward = zero_bubble ? PipelineOp::kBackwardInput : PipelineOp::kBackward;
  std::vector<PipelineAction> ops;
  RankOps add(ops);
  std::vector<int> backward_steps;
  size_t weights_done = 0;
  auto add_weight = [&] {
    add.Add(backward_stage(backward_steps[weights_done++]), PipelineOp::kBackwardWeight);
  };
  for (int step = 0; step < total; ++step) {
    if (step < warmup) {
      add.Add(forward_stage(step), PipelineOp::kForward);
      continue;
    }
    if (step < microbatch_ops) add.Add(forward_stage(step), PipelineOp::kForward);
    add.Add(backward_stage(step), backward);
    backward_steps.push_back(step);
    if (zero_bubble && step - warmup >= rank) add_weight();
  }
  while (zero_bubble && weights_done < backward_steps.size()) add_weight();
  return ops;
}

// PyTorch's ScheduleZBVZeroBubble: chunk 0 is stage `rank`, chunk 1 stage 2pp - 1 - rank.
std::vector<PipelineAction> ZbvRank(int rank, int pp, int microbatches) {
  const int n = std::max(2 * pp - 1, microbatches);
  const int chunk0 = rank;
  const int chunk1 = 2 * pp - 1 - rank;
  std::vector<PipelineAction> ops;
  RankOps add(ops);
  auto f = [&](int stage) { add.Add(stage, PipelineOp::kForward); };
  auto iw = [&](int stage) {
    add.Add(stage, PipelineOp::kBackwardInput);
    add.Add(stage, PipelineOp::kBackwardWeight);
  };
  for (int i = 0; i < 2 * (pp - rank) - 1; ++i) f(chunk0);
  for (int i = 0; i < rank; ++i) {
    f(chunk1);
    f(chunk0);
  }
  for (int i = 0; i < pp - rank; ++i) {
    f(chunk1);
    iw(chunk1);
  }
  while (add.count(chunk1, PipelineOp::kForward) < add.count(chunk0, PipelineOp::kForward) ||
         add.count(chunk0, PipelineOp::kForward) < n) {
    if (add.count(chunk0, PipelineOp::kForward) < n) f(chunk0);
    iw(chunk0);
    f(chunk1);
    iw(chunk1);
  }
  // Cool-down: input gradients first, the weight gradients they leave behind afterwards.
  auto weights_behind = [&](int stage) {
    return add.count(stage, PipelineOp::kBackwardWeight) <
           add.count(stage, PipelineOp::kBackwardInput);
  };
  for (int i = 0; i < rank; ++i) {
    add.Add(chunk0, PipelineOp::kBackwardInput);
    add.Add(chunk1, PipelineOp::kBackwardInput);
  }
  for (int i = 0; i < pp - rank; ++i) {
    add.Add(chunk0, PipelineOp::kBackwardInput);
    add.Add(chunk0, PipelineOp::kBackwardWeight);
  }
  while (weights_behind(chunk1)) add.Add(chunk1, PipelineOp::kBackwardWeight);
  while (weights_behind(chunk0)) add.Add(chunk0, PipelineOp::kBackwardWeight);
  // Fewer microbatches than the pattern needs: PyTorch drops the extra ones.
  std::vector<PipelineAction> kept;
  for (const PipelineAction& a : ops) {
    if (a.microbatch < microbatches) kept.push_back(a);
  }
  return kept;
}

// PyTorch's ScheduleDualPipeV (DeepSeek's DualPipe folded onto a V): its overlapped forward +
// backward pairs run here one after the other, forward first.
std::vector<PipelineAction> DualPipeVRank(int rank, int pp, int microbatches) {
  const int stage0 = rank;
  const int stage1 = 2 * pp - 1 - rank;
  std::vector<PipelineAction> ops;
  RankOps add(ops);
  std::deque<std::pair<int, int>> weight_queue;  // (stage, microbatch) after an I
  auto action = [&](int stage, PipelineOp op) {
    if (op == PipelineOp::kBackwardInput) {
      weight_queue.emplace_back(stage, add.count(stage, PipelineOp::kBackwardInput));
    }
    add.Add(stage, op);
  };
  auto pending_weight = [&] {
    if (weight_queue.empty()) return;
    const auto [stage, microbatch] = weight_queue.front();
    weight_queue.pop_front();
    ops.push_back({PipelineOp::kBackwardWeight, stage, microbatch});
  };
  auto overlap = [&](int forward_stage, int backward_stage) {
    action(forward_stage, PipelineOp::kForward);
    action(backward_stage, PipelineOp::kBackward);
  };
  for (int i = 0; i < (pp - rank - 1) * 2; ++i) action(stage0, PipelineOp::kForward);
  for (int i = 0; i < rank + 1; ++i) {
    action(stage0, PipelineOp::kForward);
    action(stage1, PipelineOp::kForward);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {
    action(stage1, PipelineOp::kBackwardInput);
    pending_weight();
    action(stage1, PipelineOp::kForward);
  }
  const int main_steps = microbatches - pp * 2 + rank + 1;
  for (int i = 0; i < main_steps; ++i) {
    overlap(stage0, stage1);  // the last rank's first pair is not overlapped in PyTorch either
    overlap(stage1, stage0);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {
    action(stage1, PipelineOp::kBackward);
    overlap(stage1, stage0);
  }
  bool split = false;
  const int tail = rank + 1;
  for (int i = 0; i < tail; ++i) {
    if (i == tail / 2 && rank % 2 == 1) split = true;
    action(stage1, split ? PipelineOp::kBackwardInput : PipelineOp::kBackward);
    if (i == tail / 2 && rank % 2 == 0) split = true;
    action(stage0, split ? PipelineOp::kBackwardInput : PipelineOp::kBackward);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {
    pending_weight();
    action(stage0, split ? PipelineOp::kBackwardInput : PipelineOp::kBackward);
  }
  for (int i = 0; i < rank + 1; ++i) pending_weight();
  return ops;
}

// Rank `rank`'s actions under the schedule called `name`.
std::vector<PipelineAction> RankActions(const std::string& name, int rank, int pp,
                                        int stages_per_rank, int microbatches) {
  if (name == "GPipe") return GPipeRank(rank, microbatches);
  if (name == "1F1B") return OneFOneBRank(rank, pp, microbatches);
  if (name == "LoopedBFS") return LoopedBfsRank(rank, pp, stages_per_rank, microbatches);
  if (name == "Interleaved1F1B" || name == "InterleavedZeroBubble") {
    return InterleavedRank(rank, pp, stages_per_rank, microbatches,
                           /*zero_bubble=*/name == "InterleavedZeroBubble");
  }
  if (name == "ZBVZeroBubble") return ZbvRank(rank, pp, microbatches);
  return DualPipeVRank(rank, pp, microbatches);
}

}  // namespace

std::string ActionName(const PipelineAction& action) {
  return absl::StrCat(action.stage, std::string(1, kOpLetters[static_cast<int>(action.op)]),
                      action.microbatch);
}

absl::StatusOr<PipelineAction> ParseAction(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  const size_t letter = text.find_first_not_of("0123456789");
  PipelineAction action;
  const char* found = letter == absl::string_view::npos || letter == 0
                          ? nullptr
                          : std::find(std::begin(kOpLetters), std::end(kOpLetters), text[letter]);
  if (found == nullptr || found == std::end(kOpLetters) ||
      !absl::SimpleAtoi(text.substr(0, letter), &action.stage) ||
      !absl::SimpleAtoi(text.substr(letter + 1), &action.microbatch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline action \"", text,
        "\": expected <stage><F|B|I|W><microbatch>, e.g. 2F0 (communication is implied)"));
  }
  action.op = static_cast<PipelineOp>(found - std::begin(kOpLetters));
  return action;
}

absl::StatusOr<ScheduleKind> FindScheduleKind(absl::string_view name) {
  static const ScheduleKind kKinds[] = {
      {"GPipe", false, StagePlacement::kLoop},
      {"1F1B", false, StagePlacement::kLoop},
      {"Interleaved1F1B", true, StagePlacement::kLoop},
      {"LoopedBFS", true, StagePlacement::kLoop},
      {"InterleavedZeroBubble", true, StagePlacement::kLoop},
      {"ZBVZeroBubble", true, StagePlacement::kV},
      {"DualPipeV", true, StagePlacement::kV},
  };
  for (const ScheduleKind& kind : kKinds) {
    if (absl::EqualsIgnoreCase(kind.name, name)) return kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown schedule \"", name,
                   "\"; expected GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, "
                   "ZBVZeroBubble or DualPipeV"));
}

int RankOfStage(StagePlacement placement, int pp, int stages_per_rank, int stage) {
  if (placement == StagePlacement::kV && stages_per_rank == 2 && stage >= pp) {
    return 2 * pp - 1 - stage;
  }
  return stage % pp;
}

absl::StatusOr<PipelineSchedule> BuildSchedule(const ScheduleKind& kind, int pp,
                                               int stages_per_rank, int microbatches) {
  const int stages = pp * stages_per_rank;
  const std::string what =
      absl::StrCat("pipeline schedule ", kind.name, " (", pp, " ranks, ", stages_per_rank,
                   " stage(s) per rank, ", microbatches, " microbatches)");
  if (pp < 1 || microbatches < 1 || stages_per_rank < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": every count must be positive"));
  }
  if (!kind.multi_stage && stages_per_rank != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a single-stage schedule runs exactly one stage per rank"));
  }
  if (kind.multi_stage && stages_per_rank < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a multi-stage schedule runs at least two stages per rank"));
  }
  if (kind.placement == StagePlacement::kV && stages_per_rank != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": V schedules run exactly two stages per rank"));
  }
  if ((kind.name == "1F1B" || kind.name == "DualPipeV") && microbatches < stages) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": needs at least as many microbatches as stages (", stages, ")"));
  }
  const bool interleaved = kind.name == "Interleaved1F1B" || kind.name == "InterleavedZeroBubble";
  const int rounds = std::max(1, microbatches / pp);
  if (interleaved && microbatches % rounds != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the microbatches must be a multiple of the number of rounds (", rounds,
        " = microbatches / ranks)"));
  }
  PipelineSchedule schedule;
  for (int r = 0; r < pp; ++r) schedule.push_back(RankActions(kind.name, r, pp, stages_per_rank, microbatches));
  return schedule;
}

}  // namespace titan
