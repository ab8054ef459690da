#include "lib/checkpoint/async_checkpoint_saver.h"

#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace titan {
namespace {

// A CPU copy that later training steps cannot change.
absl::StatusOr<NamedTensors> Stage(const NamedTensors& tensors) {
  c10::NoGradGuard no_grad;
  NamedTensors staged;
  staged.reserve(tensors.size());
  try {
    for (const auto& [name, tensor] : tensors) {
      staged.emplace_back(name, tensor.detach().to(at::kCPU, /*non_blocking=*/false,
                                                   /*copy=*/true));
    }
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("staging a checkpoint copy: ", e.what_without_backtrace()));
  }
  return staged;
}

}  // namespace

AsyncCheckpointSaver::~AsyncCheckpointSaver() { Wait().IgnoreError(); }

absl::Status AsyncCheckpointSaver::Start(int64_t step, const CheckpointState& state,
                                         bool model_only) {
  if (in_flight()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint step ", step, ": the previous save is still in flight"));
  }
  CheckpointState staged;
  absl::StatusOr<NamedTensors> model = Stage(state.model);
  if (!model.ok()) return model.status();
  staged.model = *std::move(model);
  if (!model_only) {
    absl::StatusOr<NamedTensors> optimizer = Stage(state.optimizer);
    if (!optimizer.ok()) return optimizer.status();
    staged.optimizer = *std::move(optimizer);
  }
  staged.extra = state.extra;
  staged.boxes = state.boxes;
  thread_ = std::thread([this, step, model_only, staged = std::move(staged)] {
    // Nice 10: the write mostly takes cycles the training threads leave (a preempted training
    // thread stalls a whole parallel region at its barrier) yet still ends within a few steps;
    // SCHED_IDLE or nice 19 starved it for 5+ s on a busy 2-core machine.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
    result_ = manager_->Save(step, staged, model_only);
  });
  return absl::OkStatus();
}

absl::Status AsyncCheckpointSaver::Wait() {
  if (!thread_.joinable()) return absl::OkStatus();
  thread_.join();
  return std::exchange(result_, absl::OkStatus());
}

}  // namespace titan
