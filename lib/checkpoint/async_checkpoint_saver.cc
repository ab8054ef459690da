#include "lib/checkpoint/async_checkpoint_saver.h"

#include <c10/core/Event.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace titan {

absl::StatusOr<NamedTensors> AsyncCheckpointSaver::Stage(const NamedTensors& tensors,
                                                         PinnedHostArena& arena,
                                                         std::optional<c10::Device>& queued_on) {
  c10::NoGradGuard no_grad;
  try {
    if (staging_ == CheckpointStaging::kCopyPerSave) {
      NamedTensors staged;
      staged.reserve(tensors.size());
      // Copies that later training steps cannot change.
      for (const auto& [name, tensor] : tensors) {
        staged.emplace_back(name, tensor.detach().to(at::kCPU, /*non_blocking=*/false,
                                                     /*copy=*/true));
      }
      return staged;
    }
    absl::StatusOr<NamedTensors> staged = arena.Views(tensors);
    if (!staged.ok()) return staged.status();
    for (size_t i = 0; i < tensors.size(); ++i) {
      const at::Tensor& tensor = tensors[i].second;
      // Into pinned memory a GPU copy is queued on the current stream, after the step that
      // produced the values and before the next one changes them.
      const bool queued = tensor.is_cuda() && arena.pinned();
      (*staged)[i].second.copy_(tensor.detach(), /*non_blocking=*/queued);
      if (queued) queued_on = tensor.device();
    }
    return staged;
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("staging a checkpoint copy: ", e.what_without_backtrace()));
  }
}

AsyncCheckpointSaver::~AsyncCheckpointSaver() { Wait().IgnoreError(); }

absl::Status AsyncCheckpointSaver::Start(int64_t step, const CheckpointState& state,
                                         bool model_only) {
  if (in_flight()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint step ", step, ": the previous save is still in flight"));
  }
  CheckpointState staged;
  std::optional<c10::Device> queued_on;
  absl::StatusOr<NamedTensors> model = Stage(state.model, model_arena_, queued_on);
  if (!model.ok()) return model.status();
  staged.model = *std::move(model);
  if (!model_only) {
    absl::StatusOr<NamedTensors> optimizer = Stage(state.optimizer, optimizer_arena_, queued_on);
    if (!optimizer.ok()) return optimizer.status();
    staged.optimizer = *std::move(optimizer);
  }
  staged.extra = state.extra;
  staged.boxes = state.boxes;
  // Marks the end of the queued copies; the thread waits for it, not the training loop.
  std::shared_ptr<c10::Event> copied;
  if (queued_on) {
    copied = std::make_shared<c10::Event>(queued_on->type());
    copied->record(c10::impl::VirtualGuardImpl(queued_on->type()).getStream(*queued_on));
  }
  thread_ = std::thread([this, step, model_only, copied, staged = std::move(staged)] {
    // Nice 10: the write mostly takes cycles the training threads leave (a preempted training
    // thread stalls a whole parallel region at its barrier) yet still ends within a few steps;
    // SCHED_IDLE or nice 19 starved it for 5+ s on a busy 2-core machine.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
    if (copied) copied->synchronize();
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
