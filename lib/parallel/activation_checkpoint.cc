#include "lib/parallel/activation_checkpoint.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <memory>
#include <optional>
#include <utility>

#include "lib/model/autocast.h"
#include "lib/model/op_cache.h"

namespace titan {
namespace {

// What backward needs besides the input, kept in the autograd context (a capsule needs no class
// registration).
struct RecomputeState : public torch::CustomClassHolder {
  CheckpointedFn fn;
  std::optional<at::ScalarType> autocast_dtype;
  std::unique_ptr<OpCache> op_cache;  // null: recompute everything
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const CheckpointedFn& fn, bool selective) {
    auto state = c10::make_intrusive<RecomputeState>();
    state->fn = fn;
    state->autocast_dtype = AutocastScope::Current(x.device().type());
    ctx->save_for_backward({x});
    at::Tensor out;
    if (selective) {
      state->op_cache = std::make_unique<OpCache>();
      OpCacheScope record(state->op_cache.get(), OpCache::Mode::kRecord);
      out = fn(x);  // grad mode is off inside a custom forward: only the cache keeps tensors
    } else {
      out = fn(x);
    }
    ctx->saved_data["state"] = at::IValue::make_capsule(std::move(state));
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto state =
        c10::static_intrusive_pointer_cast<RecomputeState>(ctx->saved_data["state"].toCapsule());
    at::Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    at::Tensor out;
    {
      c10::AutoGradMode enable_grad(true);
      AutocastScope autocast(x.device().type(), state->autocast_dtype);
      if (state->op_cache != nullptr) {
        state->op_cache->StartReplay();
        OpCacheScope replay(state->op_cache.get(), OpCache::Mode::kReplay);
        out = state->fn(x);
      } else {
        out = state->fn(x);
      }
    }
    torch::autograd::backward({out}, {grad_outputs[0]});
    return {x.grad(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CheckpointedCall(const CheckpointedFn& fn, const at::Tensor& x,
                            RecomputePolicy policy) {
  if (!c10::GradMode::is_enabled()) return fn(x);
  return CheckpointFunction::apply(x, fn, policy == RecomputePolicy::kCheapOpsOnly);
}

}  // namespace titan
