// FsdpReduceScatterQueue (declared in fsdp.h beside the groups it drives): the reduce-scatter
// overlap's issue order, waits and end-of-backward drain.
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/graph_task.h>

#include <memory>
#include <utility>

#include "lib/parallel/fsdp.h"

namespace titan {

struct FsdpReduceScatterQueue::InFlight {
  const FsdpParamGroup* group;
  FsdpParamGroup::PendingReduceScatter pending;
};

FsdpReduceScatterQueue::FsdpReduceScatterQueue() = default;

FsdpReduceScatterQueue::~FsdpReduceScatterQueue() {
  // A backward that threw leaves its collectives to finish before the buffers go.
  for (const auto* pending : {&all_reducing_, &in_flight_}) {
    if (*pending != nullptr) (void)(*pending)->pending.work->Wait();
  }
}

void FsdpReduceScatterQueue::Issue(const FsdpParamGroup& group,
                                   const std::vector<at::Tensor>& full_grads) {
  absl::Status status = Finish(std::move(all_reducing_));
  TORCH_CHECK(status.ok(), status.ToString());
  if (in_flight_ != nullptr && in_flight_->group->replicated()) {
    in_flight_->group->StartReplicaAllReduce(in_flight_->pending);
    all_reducing_ = std::move(in_flight_);
  }
  status = Finish(std::move(in_flight_));
  TORCH_CHECK(status.ok(), status.ToString());
  in_flight_ = std::make_unique<InFlight>(InFlight{&group, group.StartReduceScatter(full_grads)});
  const int graph_task = torch::autograd::get_current_graph_task_id();
  if (graph_task != -1 && graph_task != drain_queued_for_) {
    drain_queued_for_ = graph_task;
    // The last group's collective would otherwise hold its full gradients into the next forward.
    torch::autograd::Engine::get_default_engine().queue_callback([this] {
      const absl::Status status = Drain();
      TORCH_CHECK(status.ok(), status.ToString());
    });
  }
}

absl::Status FsdpReduceScatterQueue::Finish(std::unique_ptr<InFlight> done) {
  if (done == nullptr) return absl::OkStatus();
  try {
    done->group->AccumulateShardGrads(done->group->FinishReduceScatter(std::move(done->pending)));
  } catch (const c10::Error& error) {
    return absl::InternalError(error.what_without_backtrace());
  }
  return absl::OkStatus();
}

absl::Status FsdpReduceScatterQueue::Drain() {
  // In issue order: every rank finishes its groups' collectives in the same order.
  const absl::Status all_reduced = Finish(std::move(all_reducing_));
  const absl::Status reduced = Finish(std::move(in_flight_));
  return all_reduced.ok() ? reduced : all_reduced;
}

}  // namespace titan
