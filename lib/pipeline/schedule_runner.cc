#include "lib/pipeline/schedule_runner.h"

#include <c10/core/GradMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/pipeline/schedule_check.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// The stage whose tensor `action` needs (the previous one's output for a forward, the next one's
// input gradient for a backward); none for the first stage's forward, the last stage's backward
// (it starts from the loss) and W.
std::optional<int> SourceOf(const PipelineAction& action, int num_stages) {
  switch (action.op) {
    case PipelineOp::kForward:
      if (action.stage == 0) return std::nullopt;
      return action.stage - 1;
    case PipelineOp::kBackward:
    case PipelineOp::kBackwardInput:
      if (action.stage + 1 == num_stages) return std::nullopt;
      return action.stage + 1;
    case PipelineOp::kBackwardWeight:
      return std::nullopt;
  }
  return std::nullopt;
}

// The stage that receives what `action` produces; none for the last stage's forward (its loss),
// the first stage's backward and W.
std::optional<int> DestinationOf(const PipelineAction& action, int num_stages) {
  switch (action.op) {
    case PipelineOp::kForward:
      if (action.stage + 1 == num_stages) return std::nullopt;
      return action.stage + 1;
    case PipelineOp::kBackward:
    case PipelineOp::kBackwardInput:
      if (action.stage == 0) return std::nullopt;
      return action.stage - 1;
    case PipelineOp::kBackwardWeight:
      return std::nullopt;
  }
  return std::nullopt;
}

// One tag for every transfer: Gloo then pairs a peer's sends and receives in issue order, as NCCL
// does (it has no tags), so the CPU runs check the order the rounds fix.
constexpr int kTransferTag = 0;

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

// A timed event at this point of `device`'s current stream.
c10::Event RecordTimedEvent(const c10::Device& device) {
  c10::Event event(device.type(), c10::EventFlag::BACKEND_DEFAULT);  // with timing
  event.record(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
  return event;
}

}  // namespace

bool PipelineNeed::operator<(const PipelineNeed& other) const {
  return std::tie(grad, stage, microbatch) < std::tie(other.grad, other.stage, other.microbatch);
}

PipelineRoundPlan PlanRounds(const PipelineLayout& layout, const ScheduleTimeline& timeline,
                             int rank) {
  const int num_stages = layout.num_stages();
  PipelineRoundPlan plan;
  std::map<int, PipelineRoundPlan::Round> rounds;
  for (size_t r = 0; r < timeline.ranks.size(); ++r) {
    const int from = static_cast<int>(r);
    for (const ScheduleTimeline::Slot& slot : timeline.ranks[r]) {
      const int round = static_cast<int>(std::lround(slot.start));
      if (from == rank) {
        plan.actions.push_back(slot.action);
        plan.action_rounds.push_back(round);
      }
      const std::optional<int> to_stage = DestinationOf(slot.action, num_stages);
      if (!to_stage) continue;
      const int to = layout.RankOfStage(*to_stage);
      if (to == from || (from != rank && to != rank)) continue;
      const PipelineNeed need{slot.action.op != PipelineOp::kForward, *to_stage,
                              slot.action.microbatch};
      rounds[round].transfers.push_back({from == rank, need, from == rank ? to : from});
    }
  }
  for (auto& [index, round] : rounds) {
    round.index = index;
    plan.rounds.push_back(std::move(round));
  }
  return plan;
}

ScheduleRunner::ScheduleRunner(const PipelineLayout& layout, std::map<int, PipelineStage*> stages,
                               Communicator* comm, int rank, int microbatches, int64_t hidden_dim,
                               int64_t sequence_shards, at::ScalarType activation_dtype,
                               PipelineRoundPlan plan)
    : layout_(layout),
      stages_(std::move(stages)),
      comm_(comm),
      microbatches_(microbatches),
      hidden_dim_(hidden_dim),
      sequence_shards_(sequence_shards),
      activation_dtype_(activation_dtype),
      rank_(rank),
      plan_(std::move(plan)) {}

absl::StatusOr<std::unique_ptr<ScheduleRunner>> ScheduleRunner::Create(
    const PipelineLayout& layout, std::map<int, PipelineStage*> stages, Communicator* comm,
    const ScheduleTimeline& timeline, int microbatches, int64_t hidden_dim, int64_t sequence_shards,
    at::ScalarType activation_dtype) {
  if (stages.empty()) return absl::InvalidArgumentError("pipeline runner: no local stages");
  const int rank = layout.RankOfStage(stages.begin()->first);
  PipelineRoundPlan plan = PlanRounds(layout, timeline, rank);
  if (!plan.rounds.empty() && comm == nullptr) {
    return absl::InvalidArgumentError(
        "pipeline runner: stages on other ranks but no pipeline communicator");
  }
  return std::unique_ptr<ScheduleRunner>(
      new ScheduleRunner(layout, std::move(stages), comm, rank, microbatches, hidden_dim,
                         sequence_shards, activation_dtype, std::move(plan)));
}

void ScheduleRunner::FoldDeviceSpans(bool wait) {
  if (wait && !device_spans_.empty()) device_spans_.back().end.synchronize();
  while (!device_spans_.empty() && device_spans_.front().end.query()) {
    const DeviceSpan& span = device_spans_.front();
    const double seconds = span.start.elapsedTime(span.end) / 1e3;
    (span.waiting ? times_.waiting_seconds : times_.total_seconds) += seconds;
    device_spans_.pop_front();
  }
}

ScheduleRunner::Times ScheduleRunner::TakeTimes() {
  FoldDeviceSpans(/*wait=*/true);
  return std::exchange(times_, Times());
}

absl::StatusOr<at::Tensor> ScheduleRunner::Run(const std::vector<Batch>& microbatches,
                                               const StageRun& run) {
  const absl::Time start = absl::Now();
  const int count = static_cast<int>(microbatches.size());
  if (count != microbatches_) {
    return absl::InternalError(absl::StrCat("pipeline runner: ", count,
                                            " microbatches for a schedule of ", microbatches_));
  }
  const c10::Device device = microbatches.front().tokens.device();
  const bool device_timed = device.is_cuda();
  std::optional<c10::Event> device_start;
  if (device_timed) device_start = RecordTimedEvent(device);
  const int num_stages = layout_.num_stages();
  const at::TensorOptions options = at::TensorOptions().dtype(at::kFloat).device(device);
  const at::TensorOptions activation_options = options.dtype(activation_dtype_);
  struct Incoming {
    at::Tensor tensor;
    std::optional<size_t> round;  // the batch receiving it; none: handed over by a local stage
  };
  std::map<PipelineNeed, Incoming> incoming;
  std::map<PipelineNeed, at::Tensor> outgoing;  // produced, for its round's batch
  std::vector<std::unique_ptr<Work>> works(plan_.rounds.size());
  std::vector<std::vector<at::Tensor>> in_flight(plan_.rounds.size());  // alive until waited for
  size_t next_round = 0;
  double waiting = 0;
  auto wait_round = [&](size_t round) -> absl::Status {
    const absl::Time wait_start = absl::Now();
    std::optional<c10::Event> before;
    if (device_timed) before = RecordTimedEvent(device);
    const absl::Status status = works[round]->Wait();
    if (device_timed) {
      device_spans_.push_back({*std::move(before), RecordTimedEvent(device), /*waiting=*/true});
    } else {
      waiting += Seconds(wait_start);
    }
    in_flight[round].clear();
    return status;
  };

  // Starts the batches of every round up to `last` not started yet.
  auto start_rounds = [&](int last) -> absl::Status {
    for (; next_round < plan_.rounds.size() && plan_.rounds[next_round].index <= last;
         ++next_round) {
      std::vector<P2POp> ops;
      for (const PipelineRoundPlan::Transfer& transfer : plan_.rounds[next_round].transfers) {
        const PipelineNeed& need = transfer.need;
        const int from_stage = need.grad ? need.stage + 1 : need.stage - 1;
        at::Tensor tensor;
        if (transfer.send) {
          auto it = outgoing.find(need);
          if (it == outgoing.end()) {
            return absl::InternalError(
                absl::StrCat("pipeline round ", plan_.rounds[next_round].index, " sends stage ",
                             from_stage, "'s tensor before it was computed"));
          }
          tensor = std::move(it->second);
          outgoing.erase(it);
        } else {
          const at::Tensor& tokens = microbatches[need.microbatch].tokens;
          tensor = at::empty({tokens.size(0), tokens.size(1) / sequence_shards_, hidden_dim_},
                             activation_options);
          incoming[need] = {tensor, next_round};
        }
        ops.push_back({transfer.send, tensor, transfer.peer, kTransferTag});
        in_flight[next_round].push_back(tensor);
      }
      TITAN_ASSIGN_OR_RETURN(works[next_round], comm_->BatchP2P(std::move(ops)));
    }
    return absl::OkStatus();
  };
  auto take = [&](const PipelineAction& action) -> absl::StatusOr<at::Tensor> {
    const std::optional<int> source = SourceOf(action, num_stages);
    if (!source) return at::Tensor();
    const PipelineNeed need{action.op != PipelineOp::kForward, action.stage, action.microbatch};
    auto it = incoming.find(need);
    if (it == incoming.end()) {
      return absl::InternalError(absl::StrCat("pipeline action ", ActionName(action),
                                              " needs stage ", *source,
                                              "'s tensor, which no earlier action produced"));
    }
    if (it->second.round) TITAN_RETURN_IF_ERROR(wait_round(*it->second.round));
    at::Tensor tensor = std::move(it->second.tensor);
    incoming.erase(it);
    return tensor;
  };
  // A forward's output goes to the next stage, a backward's input gradient to the previous one.
  auto deliver = [&](const PipelineAction& action, const at::Tensor& tensor) {
    const std::optional<int> to_stage = DestinationOf(action, num_stages);
    if (!to_stage) return;
    const PipelineNeed need{action.op != PipelineOp::kForward, *to_stage, action.microbatch};
    if (layout_.RankOfStage(*to_stage) == rank_) {
      incoming[need] = {tensor.detach(), std::nullopt};
    } else {
      outgoing[need] = tensor.detach().to(activation_dtype_).contiguous();
    }
  };

  at::Tensor loss_sum = at::zeros({}, options);
  for (size_t k = 0; k < plan_.actions.size(); ++k) {
    const PipelineAction& action = plan_.actions[k];
    // Receives of earlier rounds start before this action; its own round's batch right after.
    TITAN_RETURN_IF_ERROR(start_rounds(plan_.action_rounds[k] - 1));
    const auto stage_it = stages_.find(action.stage);
    if (stage_it == stages_.end()) {
      return absl::InternalError(
          absl::StrCat("pipeline action ", ActionName(action), " is not for this rank's stages"));
    }
    PipelineStage& stage = *stage_it->second;
    const int m = action.microbatch;
    TITAN_ASSIGN_OR_RETURN(at::Tensor received, take(action));
    switch (action.op) {
      case PipelineOp::kForward: {
        if (received.defined() && c10::GradMode::is_enabled()) received.requires_grad_(true);
        const at::Tensor out = stage.Forward(m, microbatches[m], received, run);
        if (stage.is_last()) {
          loss_sum += out.detach();
        } else {
          deliver(action, out);
        }
        break;
      }
      case PipelineOp::kBackward:
      case PipelineOp::kBackwardInput: {
        const at::Tensor grad = action.op == PipelineOp::kBackward
                                    ? stage.Backward(m, received)
                                    : stage.BackwardInput(m, received);
        if (!stage.is_first()) deliver(action, grad);
        break;
      }
      case PipelineOp::kBackwardWeight:
        stage.BackwardWeight(m);
        break;
    }
    TITAN_RETURN_IF_ERROR(start_rounds(plan_.action_rounds[k]));
  }
  TITAN_RETURN_IF_ERROR(start_rounds(std::numeric_limits<int>::max()));
  for (size_t round = 0; round < works.size(); ++round) TITAN_RETURN_IF_ERROR(wait_round(round));
  if (device_timed) {
    device_spans_.push_back(
        {*std::move(device_start), RecordTimedEvent(device), /*waiting=*/false});
    FoldDeviceSpans(/*wait=*/false);
  } else {
    times_.total_seconds += Seconds(start);
    times_.waiting_seconds += waiting;
  }
  return loss_sum;
}

}  // namespace titan
