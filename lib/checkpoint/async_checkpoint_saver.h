#ifndef TITAN_LIB_CHECKPOINT_ASYNC_CHECKPOINT_SAVER_H_
#define TITAN_LIB_CHECKPOINT_ASYNC_CHECKPOINT_SAVER_H_

#include <cstdint>
#include <thread>

#include "absl/status/status.h"
#include "lib/checkpoint/checkpoint_manager.h"

namespace titan {

// Saves checkpoints on a background thread so training continues while files are written: Start()
// stages a CPU copy of the state and returns; the write (and rank 0's commit) runs on the thread.
// Extra memory: one copy of what this rank saves, held until that save finishes. One save at a
// time; Wait() returns its outcome. The writes are paced (`write_duty_cycle`, see
// CheckpointManager::set_write_duty_cycle) so that no single training step absorbs the whole write.
class AsyncCheckpointSaver {
 public:
  explicit AsyncCheckpointSaver(CheckpointManager* manager, double write_duty_cycle = 0.25)
      : manager_(manager) {
    manager_->set_write_duty_cycle(write_duty_cycle);
  }
  ~AsyncCheckpointSaver();  // Waits for a save in flight.

  // FailedPrecondition while a save is in flight (Wait() first).
  absl::Status Start(int64_t step, const CheckpointState& state, bool model_only);
  // Blocks until the save in flight (if any) has finished: its status; OK when there was none.
  absl::Status Wait();
  bool in_flight() const { return thread_.joinable(); }

 private:
  CheckpointManager* manager_;
  std::thread thread_;
  absl::Status result_;
};

}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_ASYNC_CHECKPOINT_SAVER_H_
