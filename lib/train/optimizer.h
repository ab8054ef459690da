#ifndef TITAN_LIB_TRAIN_OPTIMIZER_H_
#define TITAN_LIB_TRAIN_OPTIMIZER_H_

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/model/module.h"

namespace torch::optim {
class AdamW;
}  // namespace torch::optim

namespace titan {

struct OptimizerOptions {
  std::string name = "AdamW";
  double lr = 8e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// LibTorch's AdamW over a model's parameters. Weight decay applies to matrices only: norms (1-D)
// and the token embedding are excluded, the usual practice for LLMs.
class Optimizer {
 public:
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const std::vector<ParamRef>& params,
                                                           const OptimizerOptions& options);
  ~Optimizer();

  void ZeroGrad();
  void Step();
  // Sets every group's learning rate to base lr × factor (the schedule's output).
  void SetLrFactor(double factor);
  double lr() const;

  // Creates every parameter's state as a first step would (zeros, step 0), so StateDict() has
  // tensors a checkpoint can be loaded into.
  void InitState();

  // Flattened state: "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step" (int64 scalar).
  NamedTensors StateDict() const;
  // Restores StateDict() output; names and shapes must match the current parameters.
  absl::Status LoadStateDict(const NamedTensors& state);

 private:
  Optimizer(std::vector<ParamRef> params, const OptimizerOptions& options);

  std::vector<ParamRef> params_;
  OptimizerOptions options_;
  std::unique_ptr<torch::optim::AdamW> adamw_;
};

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_OPTIMIZER_H_
