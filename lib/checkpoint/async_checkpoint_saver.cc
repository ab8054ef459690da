#include "lib/checkpoint/async_checkpoint_saver.h"

#include <c10/core/Event.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace titan {

namespace {

// Blocks until every copy queued so far on these devices' current streams has finished.
void SynchronizeStreams(const std::vector<c10::Device>& devices) {
  for (const c10::Device& device : devices) {
    c10::impl::VirtualGuardImpl(device.type()).getStream(device).synchronize();
  }
}

}  // namespace

absl::StatusOr<NamedTensors> AsyncCheckpointSaver::Stage(const NamedTensors& tensors,
                                                         PinnedHostArena& arena,
                                                         std::vector<c10::Device>& queued_on) {
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
      if (queued && std::find(queued_on.begin(), queued_on.end(), tensor.device()) ==
                        queued_on.end()) {
        queued_on.push_back(tensor.device());
      }
    }
    return staged;
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("staging a checkpoint copy: ", e.what_without_backtrace()));
  }
}

AsyncCheckpointSaver::~AsyncCheckpointSaver() {
  if (!in_flight()) return;
  GiveUp();
  const absl::Status status = Wait();
  if (!status.ok()) LOG(WARNING) << "Gave up the checkpoint save in flight: " << status;
}

absl::Status AsyncCheckpointSaver::Start(int64_t step, const CheckpointState& state,
                                         bool model_only) {
  if (in_flight()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint step ", step, ": the previous save is still in flight"));
  }
  CheckpointState staged;
  std::vector<c10::Device> queued_on;
  absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<NamedTensors> model = Stage(state.model, model_arena_, queued_on);
    if (!model.ok()) return model.status();
    staged.model = *std::move(model);
    if (model_only) return absl::OkStatus();
    absl::StatusOr<NamedTensors> optimizer = Stage(state.optimizer, optimizer_arena_, queued_on);
    if (!optimizer.ok()) return optimizer.status();
    staged.optimizer = *std::move(optimizer);
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    // Copies already queued into the arenas must land before anything may free or reuse them.
    try {
      SynchronizeStreams(queued_on);
    } catch (const c10::Error& e) {
      LOG(ERROR) << "after a failed checkpoint staging: " << e.what_without_backtrace();
    }
    return status;
  }
  giving_up_ = false;
  staged.extra = state.extra;
  staged.boxes = state.boxes;
  // Marks the end of the queued copies, one event per GPU; the thread waits, not training.
  std::vector<std::shared_ptr<c10::Event>> copied;
  for (const c10::Device& device : queued_on) {
    copied.push_back(std::make_shared<c10::Event>(device.type()));
    copied.back()->record(c10::impl::VirtualGuardImpl(device.type()).getStream(device));
  }
  thread_ = std::thread([this, step, model_only, copied, staged = std::move(staged)] {
    // Nice 10: the write mostly takes cycles the training threads leave (a preempted training
    // thread stalls a whole parallel region at its barrier) yet still ends within a few steps;
    // SCHED_IDLE or nice 19 starved it for 5+ s on a busy 2-core machine.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
    try {
      for (const std::shared_ptr<c10::Event>& event : copied) {
        // This thread's CUDA calls (the wait, the event's destruction) then use the copies' GPU:
        // a new thread's current device is 0, where CUDA would make another context.
        c10::impl::VirtualGuardImpl(event->device_type()).setDevice(event->device());
        event->synchronize();
      }
    } catch (const c10::Error& e) {
      result_ = absl::InternalError(absl::StrCat("checkpoint step ", step,
                                                 ": waiting for the copies from the GPU: ",
                                                 e.what_without_backtrace()));
      return;
    }
    result_ = manager_->Save(step, staged, model_only, &giving_up_);
  });
  return absl::OkStatus();
}

absl::Status AsyncCheckpointSaver::Wait() {
  if (!thread_.joinable()) return absl::OkStatus();
  thread_.join();
  return std::exchange(result_, absl::OkStatus());
}

}  // namespace titan
