#include "lib/pipeline/schedule_runner.h"

#include <c10/core/GradMode.h>

#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// A tensor one action needs: a forward's input or a backward's output gradient.
struct Need {
  bool grad = false;
  int stage = 0;  // the stage that needs it
  int microbatch = 0;
  bool operator<(const Need& other) const {
    return std::tie(grad, stage, microbatch) < std::tie(other.grad, other.stage, other.microbatch);
  }
};

// What `action` needs from another stage, and that stage; none for the first stage's forward, the
// last stage's backward (it starts from the loss) and W.
std::optional<std::pair<Need, int>> NeedOf(const PipelineAction& action, int num_stages) {
  const Need need{action.op != PipelineOp::kForward, action.stage, action.microbatch};
  switch (action.op) {
    case PipelineOp::kForward:
      if (action.stage == 0) return std::nullopt;
      return std::make_pair(need, action.stage - 1);
    case PipelineOp::kBackward:
    case PipelineOp::kBackwardInput:
      if (action.stage + 1 == num_stages) return std::nullopt;
      return std::make_pair(need, action.stage + 1);
    case PipelineOp::kBackwardWeight:
      return std::nullopt;
  }
  return std::nullopt;
}

// Both ends compute the same tag from the sending stage, microbatch and direction.
int Tag(int from_stage, int microbatch, int microbatches, bool grad) {
  return (from_stage * microbatches + microbatch) * 2 + (grad ? 1 : 0);
}

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

}  // namespace

ScheduleRunner::ScheduleRunner(const PipelineLayout& layout, std::map<int, PipelineStage*> stages,
                               Communicator* comm, int64_t hidden_dim,
                               int64_t sequence_shards)
    : layout_(layout),
      stages_(std::move(stages)),
      comm_(comm),
      hidden_dim_(hidden_dim),
      sequence_shards_(sequence_shards),
      rank_(layout.RankOfStage(stages_.begin()->first)) {}

ScheduleRunner::Times ScheduleRunner::TakeTimes() { return std::exchange(times_, Times()); }

absl::StatusOr<at::Tensor> ScheduleRunner::Run(const std::vector<PipelineAction>& actions,
                                               const std::vector<Batch>& microbatches,
                                               const StageRun& run) {
  const absl::Time start = absl::Now();
  const int count = static_cast<int>(microbatches.size());
  const int num_stages = layout_.num_stages();
  const at::TensorOptions options =
      at::TensorOptions().dtype(at::kFloat).device(microbatches.front().tokens.device());
  struct Incoming {
    at::Tensor tensor;
    std::unique_ptr<Work> work;  // null: handed over by a local stage, or already waited for
  };
  std::map<Need, Incoming> incoming;
  std::vector<std::pair<at::Tensor, std::unique_ptr<Work>>> sends;
  double waiting = 0;

  auto post_receive = [&](const PipelineAction& action) -> absl::Status {
    const auto need = NeedOf(action, num_stages);
    if (!need || incoming.count(need->first) > 0) return absl::OkStatus();
    const int from = layout_.RankOfStage(need->second);
    if (from == rank_) return absl::OkStatus();  // the local producer hands it over
    const at::Tensor& tokens = microbatches[action.microbatch].tokens;
    at::Tensor buffer = at::empty({tokens.size(0), tokens.size(1) / sequence_shards_, hidden_dim_}, options);
    TITAN_ASSIGN_OR_RETURN(
        std::unique_ptr<Work> work,
        comm_->Recv(buffer, from, Tag(need->second, action.microbatch, count, need->first.grad)));
    incoming[need->first] = {buffer, std::move(work)};
    return absl::OkStatus();
  };
  auto take = [&](const PipelineAction& action) -> absl::StatusOr<at::Tensor> {
    const auto need = NeedOf(action, num_stages);
    if (!need) return at::Tensor();
    auto it = incoming.find(need->first);
    if (it == incoming.end()) {
      return absl::InternalError(absl::StrCat("pipeline action ", ActionName(action),
                                              " needs stage ", need->second,
                                              "'s tensor, which no earlier action produced"));
    }
    if (it->second.work != nullptr) {
      const absl::Time wait_start = absl::Now();
      const absl::Status status = it->second.work->Wait();
      waiting += Seconds(wait_start);
      TITAN_RETURN_IF_ERROR(status);
    }
    at::Tensor tensor = std::move(it->second.tensor);
    incoming.erase(it);
    return tensor;
  };
  // A forward's output goes to the next stage, a backward's input gradient to the previous one.
  auto deliver = [&](const PipelineAction& action, int to_stage, const at::Tensor& tensor) {
    const bool grad = action.op != PipelineOp::kForward;
    const int to = layout_.RankOfStage(to_stage);
    if (to == rank_) {
      incoming[{grad, to_stage, action.microbatch}] = {tensor.detach(), nullptr};
      return absl::OkStatus();
    }
    at::Tensor flat = tensor.detach().to(at::kFloat).contiguous();
    TITAN_ASSIGN_OR_RETURN(std::unique_ptr<Work> work,
                           comm_->Send(flat, to, Tag(action.stage, action.microbatch, count, grad)));
    sends.emplace_back(std::move(flat), std::move(work));
    return absl::OkStatus();
  };

  at::Tensor loss_sum = at::zeros({}, options);
  size_t posted = 0;
  for (size_t k = 0; k < actions.size(); ++k) {
    for (; posted < actions.size() && posted <= k + 1; ++posted) {
      TITAN_RETURN_IF_ERROR(post_receive(actions[posted]));
    }
    const PipelineAction& action = actions[k];
    const auto stage_it = stages_.find(action.stage);
    if (stage_it == stages_.end() || action.microbatch >= count) {
      return absl::InternalError(absl::StrCat("pipeline action ", ActionName(action),
                                              " is not for this rank's stages and microbatches"));
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
          TITAN_RETURN_IF_ERROR(deliver(action, action.stage + 1, out));
        }
        break;
      }
      case PipelineOp::kBackward:
      case PipelineOp::kBackwardInput: {
        const at::Tensor grad = action.op == PipelineOp::kBackward
                                    ? stage.Backward(m, received)
                                    : stage.BackwardInput(m, received);
        if (!stage.is_first()) TITAN_RETURN_IF_ERROR(deliver(action, action.stage - 1, grad));
        break;
      }
      case PipelineOp::kBackwardWeight:
        stage.BackwardWeight(m);
        break;
    }
  }
  const absl::Time drain = absl::Now();
  for (auto& [tensor, work] : sends) TITAN_RETURN_IF_ERROR(work->Wait());
  waiting += Seconds(drain);
  times_.total_seconds += Seconds(start);
  times_.waiting_seconds += waiting;
  return loss_sum;
}

}  // namespace titan
