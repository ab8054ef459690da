#include "lib/model/op_cache.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "lib/model/batch_invariant.h"
#include "lib/model/mixed_precision_linear.h"

namespace titan {
namespace {

thread_local OpCache* g_cache = nullptr;
thread_local OpCache::Mode g_mode = OpCache::Mode::kRecord;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A linear whose output was kept by the forward: returns it and computes the input and weight
// gradients with the very matmuls ATen's linear backward runs (mm_mat1/mm_mat2_backward for a
// transposed weight), so even bf16 gradients round alike.
struct ReplayedLinear : public torch::autograd::Function<ReplayedLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& output) {
    ctx->save_for_backward({x, weight});
    return output.detach();  // a fresh tensor for autograd to attach this node to
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor grad = grad_outputs[0].reshape({-1, weight.size(0)});
    const at::Tensor x2d = x.reshape({-1, weight.size(1)});
    at::Tensor grad_x = grad.mm(weight).view(x.sizes());
    at::Tensor grad_weight = grad.t().mm(x2d);
    return {grad_x, grad_weight, at::Tensor()};
  }
};

}  // namespace

OpCacheScope::OpCacheScope(OpCache* cache, OpCache::Mode mode)
    : previous_cache_(g_cache), previous_mode_(g_mode) {
  g_cache = cache;
  g_mode = mode;
}

OpCacheScope::~OpCacheScope() {
  g_cache = previous_cache_;
  g_mode = previous_mode_;
}

OpCache* CurrentOpCache() { return g_cache; }

OpCache::Mode CurrentOpCacheMode() { return g_mode; }

at::ScalarType AutocastDtype(const at::Tensor& tensor) {
  const at::DeviceType device = tensor.device().type();
  if (!tensor.is_floating_point() || !at::autocast::is_autocast_enabled(device)) {
    return tensor.scalar_type();
  }
  return at::autocast::get_autocast_dtype(device);
}

at::Tensor AutocastInput(const at::Tensor& tensor) { return tensor.to(AutocastDtype(tensor)); }

at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight, const LinearFn& fn) {
  const auto product = [&](const at::Tensor& kept) {
    if (fn) return fn(x, weight, kept);
    if (TakesMixedPrecisionLinear(x, weight)) {
      return MixedPrecisionLinear(x, weight, at::autocast::get_autocast_dtype(at::kCUDA));
    }
    return at::linear(x, weight);
  };
  // Recomputed rather than kept: the fixed-shape blocks are the point of that mode (float8
  // refuses it).
  if (BatchInvariant()) return BatchInvariantLinear(x, weight);
  OpCache* cache = CurrentOpCache();
  if (cache == nullptr) return product({});
  const bool saved = cache->NextLinearIsSaved();
  if (CurrentOpCacheMode() == OpCache::Mode::kRecord) {
    at::Tensor out = product({});
    if (saved) cache->Push(out);
    return out;
  }
  if (!saved) return product({});
  if (fn) return fn(x, weight, cache->Pop());
  if (TakesMixedPrecisionLinear(x, weight)) {
    return MixedPrecisionLinear(x, weight, at::autocast::get_autocast_dtype(at::kCUDA),
                                cache->Pop());
  }
  return ReplayedLinear::apply(AutocastInput(x), AutocastInput(weight), cache->Pop());
}

}  // namespace titan
