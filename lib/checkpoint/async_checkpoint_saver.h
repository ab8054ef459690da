#ifndef TITAN_LIB_CHECKPOINT_ASYNC_CHECKPOINT_SAVER_H_
#define TITAN_LIB_CHECKPOINT_ASYNC_CHECKPOINT_SAVER_H_

#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/pinned_host_arena.h"

namespace titan {

// How Start() copies the state to the host.
enum class CheckpointStaging {
  // A fresh copy per save, freed when it is written; a GPU tensor's copy waits for the device.
  kCopyPerSave,
  // Host buffers kept from one save to the next (PinnedHostArena: pinned for GPU tensors): the
  // copies from the GPU are queued without waiting and the writer thread waits for them once.
  // Costs host memory for the whole run (torchtitan's async_with_pinned_mem).
  kReusedPinnedBuffers,
};

// Saves checkpoints on a background thread so training continues while files are written: Start()
// stages a CPU copy of the state and returns; the write (and rank 0's commit) runs on the thread.
// Extra memory: one copy of what this rank saves, held until that save finishes (or for the run,
// with reused buffers). One save at a time; Wait() returns its outcome. The writes are paced
// (`write_duty_cycle`, see CheckpointManager::set_write_duty_cycle) so that no single training
// step absorbs the whole write.
class AsyncCheckpointSaver {
 public:
  explicit AsyncCheckpointSaver(CheckpointManager* manager, double write_duty_cycle = 0.25,
                                CheckpointStaging staging = CheckpointStaging::kCopyPerSave)
      : manager_(manager), staging_(staging) {
    manager_->set_write_duty_cycle(write_duty_cycle);
  }
  // Gives up a save in flight (GiveUp) and waits for its thread: a caller that did not Wait()
  // is ending with an error, and a dead rank's files would hold it for the whole commit timeout.
  ~AsyncCheckpointSaver();

  // FailedPrecondition while a save is in flight (Wait() first).
  absl::Status Start(int64_t step, const CheckpointState& state, bool model_only);
  // Blocks until the save in flight (if any) has finished: its status; OK when there was none.
  absl::Status Wait();
  bool in_flight() const { return thread_.joinable(); }
  // The save in flight writes the rest of this rank's files unpaced and does not wait for the
  // other ranks' (CheckpointManager::Save's `give_up_waiting`): Wait() then returns soon, Cancelled
  // if the step could not be committed without waiting. Until the next Start.
  void GiveUp() { giving_up_ = true; }

 private:
  // The host copy of `tensors` a save writes (in `arena` with reused buffers); `queued_on` gets
  // the GPUs of copies queued there without waiting.
  absl::StatusOr<NamedTensors> Stage(const NamedTensors& tensors, PinnedHostArena& arena,
                                     std::vector<c10::Device>& queued_on);

  CheckpointManager* manager_;
  const CheckpointStaging staging_;
  PinnedHostArena model_arena_;      // kReusedPinnedBuffers
  PinnedHostArena optimizer_arena_;  // kReusedPinnedBuffers
  std::thread thread_;
  absl::Status result_;
  std::atomic<bool> giving_up_{false};
};

}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_ASYNC_CHECKPOINT_SAVER_H_
