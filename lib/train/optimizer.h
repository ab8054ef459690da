#ifndef TITAN_LIB_TRAIN_OPTIMIZER_H_
#define TITAN_LIB_TRAIN_OPTIMIZER_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/config/job_config.pb.h"
#include "lib/kernels/adam.h"
#include "lib/model/module.h"

namespace titan {

// torch.optim.AdamW or Adam over a model's parameters, step for step the same ATen calls as
// torch 2.11's for-loop (_single_tensor_adam), foreach (_multi_tensor_adam) and fused
// (_fused_adam) implementations, in torchtitan's parameter groups: each parameter joins the first
// group whose pattern (a PCRE2 regex searched for in its name) matches; the rest form a last group
// with [optimizer]'s own values. Weight decay applies to every parameter unless a group says
// otherwise. Parameters without a gradient are skipped, as torch does.
class Optimizer {
 public:
  // Per-group counts of the parameters this rank claims, then per pattern a 1 where matching a
  // name failed here, summed with those of the ranks that hold the model's other pipeline stages:
  // a collective every one of them calls.
  using SumOverStages =
      std::function<absl::StatusOr<std::vector<int64_t>>(const std::vector<int64_t>& counts)>;

  // Errors name the key: an unknown name or implementation, a group without a pattern, a pattern
  // that does not compile or matches no parameter not claimed by an earlier group, betas that are
  // not a pair or are set together with beta1/beta2. `params` are this rank's; with
  // `sum_over_stages` set they are its pipeline stages', and a pattern is refused only if it
  // matches no unclaimed parameter on any stage, or matching fails on any stage's name (PCRE2's
  // backtracking limit): every stage's rank then refuses it alike.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(
      const std::vector<ParamRef>& params, const JobConfig::Optimizer& config,
      const SumOverStages& sum_over_stages = nullptr);
  ~Optimizer();

  // As torch's zero_grad: drops the gradients, or with `set_to_none` false zeroes them in place
  // (their storage stays where a captured CUDA graph accumulates into it).
  void ZeroGrad(bool set_to_none = true);
  // One step. A defined `grad_scale` (an fp32 scalar on the gradients' device: the clipping
  // scale) multiplies every gradient first, as _foreach_mul_ would: inside the update where
  // titan's Adam kernel runs (fused, fp32 on an sm_90 GPU; the gradients are then left unscaled),
  // else on the gradients before it.
  void Step(const at::Tensor& grad_scale = at::Tensor());
  // Sets every group's learning rate to its own lr × factor (the schedule's output).
  void SetLrFactor(double factor);
  // [optimizer] lr × the factor: the learning rate of parameters no group claims.
  double lr() const;

  // Creates every parameter's state as a first step would (zeros, step 0), so StateDict() has
  // tensors a checkpoint can be loaded into.
  void InitState();

  // Flattened state: "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step" (int64 scalar).
  NamedTensors StateDict() const;
  // Restores StateDict() output; names and shapes must match the current parameters.
  absl::Status LoadStateDict(const NamedTensors& state);
  // The state tensors the optimizer holds (exp_avg, exp_avg_sq and its float step per parameter
  // with state), not copies: what profile_run counts as optimizer memory.
  std::vector<at::Tensor> StateTensors() const;

 private:
  enum class Implementation { kForLoop, kForeach, kFused };

  struct Group {
    std::string pattern;  // "" for the parameters no pattern claimed
    AdamSettings hyper;   // as torch.optim.Adam's param_groups hold them
    std::vector<size_t> params;  // indices into params_
    // Matching one of this rank's names failed (the group then claims none of them).
    absl::Status match_error;
  };

  // torch's per-parameter state; `step` is a float32 scalar, on the parameter's device for fused
  // (the kernel reads it there) and on the CPU otherwise, as torch keeps it.
  struct ParamState {
    at::Tensor exp_avg;
    at::Tensor exp_avg_sq;
    at::Tensor step;
  };

  Optimizer(std::vector<ParamRef> params, std::vector<Group> groups, Implementation implementation,
            double base_lr);

  // Each of config's param_groups with the parameters it claims (the first matching pattern
  // wins; a group may claim none), then a last group of the rest with [optimizer]'s values.
  static absl::StatusOr<std::vector<Group>> ClaimParams(const std::vector<ParamRef>& params,
                                                        const JobConfig::Optimizer& config,
                                                        const AdamSettings& defaults);

  // Zero state for parameter i, with `step` steps taken.
  void CreateState(size_t i, double step);

  std::vector<ParamRef> params_;
  std::vector<ParamState> state_;  // Undefined tensors until a parameter's first step.
  std::vector<Group> groups_;
  Implementation implementation_;
  double base_lr_;
  double lr_factor_ = 1.0;
  bool kernel_logged_ = false;  // which fused implementation runs, logged at the first step
};

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_OPTIMIZER_H_
