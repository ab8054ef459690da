#ifndef TITAN_LIB_TRAIN_LR_SCHEDULER_H_
#define TITAN_LIB_TRAIN_LR_SCHEDULER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace titan {

enum class LrDecayType { kLinear, kSqrt, kCosine };

// torchtitan's linear_warmup_stable_decay schedule, as a factor on each parameter group's lr.
class WarmupStableDecaySchedule {
 public:
  // As torchtitan: warmup is capped at training_steps; decay_ratio < 0 (None) decays over every
  // step after warmup, otherwise decay = round-half-to-even(training_steps × decay_ratio), capped
  // at the steps warmup leaves; stable = training_steps + 1 - warmup - decay. Caps log warnings.
  static absl::StatusOr<WarmupStableDecaySchedule> Create(int64_t training_steps,
                                                          int64_t warmup_steps, double decay_ratio,
                                                          const std::string& decay_type,
                                                          double min_lr_factor);

  // Factor for the optimizer step that follows `completed_steps` earlier steps (0-based). Past
  // the end of decay it stays at min_lr_factor.
  double Factor(int64_t completed_steps) const;

  int64_t warmup_steps() const { return warmup_steps_; }
  int64_t stable_steps() const { return stable_steps_; }
  int64_t decay_steps() const { return decay_steps_; }

 private:
  int64_t warmup_steps_ = 0;
  int64_t stable_steps_ = 0;
  int64_t decay_steps_ = 0;
  LrDecayType decay_type_ = LrDecayType::kLinear;
  double min_lr_factor_ = 0;
};

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_LR_SCHEDULER_H_
