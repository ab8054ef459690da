#include "lib/parallel/activation_checkpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

namespace titan {
namespace {

// Holds the callable in the autograd context until backward (a capsule needs no class registration).
struct FnHolder : public torch::CustomClassHolder {
  explicit FnHolder(CheckpointedFn f) : fn(std::move(f)) {}
  CheckpointedFn fn;
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const CheckpointedFn& fn) {
    ctx->save_for_backward({x});
    ctx->saved_data["fn"] = at::IValue::make_capsule(c10::make_intrusive<FnHolder>(fn));
    return fn(x);  // grad mode is off inside a custom forward: no activation is saved
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      c10::AutoGradMode enable_grad(true);
      out = holder->fn(x);
    }
    torch::autograd::backward({out}, {grad_outputs[0]});
    return {x.grad(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CheckpointedCall(const CheckpointedFn& fn, const at::Tensor& x) {
  if (!c10::GradMode::is_enabled()) return fn(x);
  return CheckpointFunction::apply(x, fn);
}

}  // namespace titan
