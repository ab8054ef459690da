#include "lib/train/lr_scheduler.h"

#include <algorithm>
#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace titan {

absl::StatusOr<WarmupStableDecaySchedule> WarmupStableDecaySchedule::Create(
    int64_t training_steps, int64_t warmup_steps, double decay_ratio, const std::string& decay_type,
    double min_lr_factor) {
  WarmupStableDecaySchedule s;
  if (decay_type == "linear") {
    s.decay_type_ = LrDecayType::kLinear;
  } else if (decay_type == "sqrt") {
    s.decay_type_ = LrDecayType::kSqrt;
  } else if (decay_type == "cosine") {
    s.decay_type_ = LrDecayType::kCosine;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "[lr_scheduler] decay_type: expected linear, sqrt or cosine, got \"", decay_type, "\""));
  }
  if (decay_ratio > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("[lr_scheduler] decay_ratio: expected a value in [0, 1], got ", decay_ratio));
  }
  s.warmup_steps_ = warmup_steps;
  if (warmup_steps > training_steps) {
    LOG(WARNING) << "[lr_scheduler] warmup_steps (" << warmup_steps << ") exceed training steps ("
                 << training_steps << "); warmup shortened to " << training_steps;
    s.warmup_steps_ = training_steps;
  }
  if (decay_ratio < 0) {
    s.decay_steps_ = training_steps - s.warmup_steps_;
  } else {
    // Python's round() breaks ties to even, as nearbyint does in the default rounding mode.
    s.decay_steps_ = static_cast<int64_t>(std::nearbyint(training_steps * decay_ratio));
    if (s.warmup_steps_ + s.decay_steps_ > training_steps) {
      LOG(WARNING) << "[lr_scheduler] warmup (" << s.warmup_steps_ << ") + decay ("
                   << s.decay_steps_ << ") steps exceed training steps (" << training_steps
                   << "); decay shortened to " << training_steps - s.warmup_steps_;
      s.decay_steps_ = training_steps - s.warmup_steps_;
    }
  }
  // The "+ 1" is torchtitan's virtual last step, which keeps the final lr above zero.
  s.stable_steps_ = training_steps + 1 - s.warmup_steps_ - s.decay_steps_;
  s.min_lr_factor_ = min_lr_factor;
  return s;
}

double WarmupStableDecaySchedule::Factor(int64_t step) const {
  if (step < warmup_steps_) return static_cast<double>(step + 1) / warmup_steps_;
  // Without decay steps the stable phase never ends, also past training_steps.
  if (step < warmup_steps_ + stable_steps_ || decay_steps_ == 0) return 1.0;
  // Clamped: a position past the end (a resumed schedule ahead of the step count, more steps than
  // planned) stays at min_lr_factor instead of going negative (linear, sqrt) or rising (cosine).
  const double progress =
      std::min(1.0, static_cast<double>(step + 1 - warmup_steps_ - stable_steps_) / decay_steps_);
  double factor = 1.0 - progress;
  if (decay_type_ == LrDecayType::kSqrt) factor = 1.0 - std::sqrt(progress);
  if (decay_type_ == LrDecayType::kCosine) factor = 0.5 * (1.0 + std::cos(M_PI * progress));
  return min_lr_factor_ + (1.0 - min_lr_factor_) * factor;
}

}  // namespace titan
