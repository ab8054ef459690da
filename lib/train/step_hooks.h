#ifndef TITAN_LIB_TRAIN_STEP_HOOKS_H_
#define TITAN_LIB_TRAIN_STEP_HOOKS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "lib/metrics/metrics_logger.h"

namespace titan {

// The points of a training step that other components attach to (the profiler, allocator
// cleanup, MoE load balancing, RL bookkeeping), so the step itself stays one readable function.
enum class StepPhase {
  kStepBegin,        // before the first microbatch's forward
  kBeforeForward,    // each microbatch
  kAfterBackward,    // each microbatch
  kBeforeOptimizer,  // gradients final (reduced; the clipping scale is applied by the optimizer)
  kAfterOptimizer,
  kStepEnd,  // after the optimizer, before logging and checkpoints
  kOnLog,    // a logged step; `metrics` set
};
inline constexpr int kNumStepPhases = 7;

struct StepEvent {
  int64_t step = 0;        // the step running (1-based)
  int64_t microbatch = 0;  // within the step, for the per-microbatch phases
  const StepMetrics* metrics = nullptr;
};

using StepHook = std::function<absl::Status(const StepEvent&)>;

// Hooks per phase, run in the order added; the first error stops the step.
class StepHooks {
 public:
  void Add(StepPhase phase, StepHook hook) {
    hooks_[static_cast<int>(phase)].push_back(std::move(hook));
  }
  absl::Status Run(StepPhase phase, const StepEvent& event) const {
    for (const StepHook& hook : hooks_[static_cast<int>(phase)]) {
      if (absl::Status status = hook(event); !status.ok()) return status;
    }
    return absl::OkStatus();
  }

 private:
  std::array<std::vector<StepHook>, kNumStepPhases> hooks_;
};

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_STEP_HOOKS_H_
