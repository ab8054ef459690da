#include "lib/model/mixed_precision_linear.h"

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "lib/kernels/kernel_dispatch.h"
#include "lib/model/bf16_weight_copies.h"
#include "lib/model/tensor_memo.h"

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// a @ b with the result in `out_dtype`, accumulated in fp32 (a and b in a lower precision).
at::Tensor MatmulInto(const at::Tensor& a, const at::Tensor& b, at::ScalarType out_dtype) {
  if (out_dtype == a.scalar_type()) return at::mm(a, b);
  if (a.is_cuda()) return at::mm(a, b, out_dtype);
  return at::mm(a.to(out_dtype), b.to(out_dtype));
}

// This thread's last input cast, by source and dtype: weak, it keeps no cast alive.
thread_local TensorMemo<at::ScalarType, c10::weak_intrusive_ptr<c10::TensorImpl>> g_last_cast;

struct MixedPrecisionLinearFunction
    : public torch::autograd::Function<MixedPrecisionLinearFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            at::ScalarType dtype, const std::optional<at::Tensor>& kept_output) {
    const at::Tensor x_low = CastInputOnce(x, dtype);
    // Not autocast's cache: a cast made here (grad mode off) would serve later autocast ops on the
    // weight without a path back to it. In bf16, the optimizer's copy where it keeps one.
    const at::Tensor weight_low = dtype == at::kBFloat16 ? Bf16WeightOf(weight) : weight.to(dtype);
    ctx->save_for_backward({x_low, weight_low});
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    // A kept output: a fresh tensor for autograd to attach this node to.
    return kept_output ? kept_output->detach() : at::linear(x_low, weight_low);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& x_low = saved[0];
    const at::Tensor& weight_low = saved[1];
    const at::Tensor grad = grad_outputs[0].reshape({-1, weight_low.size(0)});
    at::Tensor grad_x;
    at::Tensor grad_weight;
    if (ctx->needs_input_grad(0)) {
      const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
      grad_x = MatmulInto(grad, weight_low, x_dtype).view(x_low.sizes());
    }
    if (ctx->needs_input_grad(1)) {
      grad_weight = MatmulInto(grad.t(), x_low.reshape({-1, weight_low.size(1)}), at::kFloat);
    }
    return {grad_x, grad_weight, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor CastInputOnce(const at::Tensor& x, at::ScalarType dtype) {
  if (x.scalar_type() == dtype) return x;
  if (const auto* last = g_last_cast.Find(x, dtype)) {
    if (c10::intrusive_ptr<c10::TensorImpl> cast = last->lock()) return at::Tensor(std::move(cast));
  }
  at::Tensor out = x.to(dtype);
  g_last_cast.Store(x, dtype, c10::weak_intrusive_ptr<c10::TensorImpl>(out.getIntrusivePtr()));
  return out;
}

at::Tensor MixedPrecisionLinear(const at::Tensor& x, const at::Tensor& weight, at::ScalarType dtype,
                                const at::Tensor& kept_output) {
  // An optional, not an undefined tensor: autograd records every tensor argument as an input.
  return MixedPrecisionLinearFunction::apply(
      x, weight, dtype,
      kept_output.defined() ? std::optional<at::Tensor>(kept_output) : std::nullopt);
}

bool TakesMixedPrecisionLinear(const at::Tensor& x, const at::Tensor& weight) {
  if (!x.is_cuda() || weight.scalar_type() != at::kFloat || !weight.requires_grad() ||
      !c10::GradMode::is_enabled() || !at::autocast::is_autocast_enabled(at::kCUDA) ||
      !FusedKernelEnabled(FusedKernel::kMixedPrecisionLinear)) {
    return false;
  }
  // x in fp32 or already in the autocast dtype: the gradient GEMMs write those (autocast leaves
  // fp64 alone, and fp16 output from bf16 operands does not exist).
  const at::ScalarType dtype = at::autocast::get_autocast_dtype(at::kCUDA);
  return dtype != at::kFloat && (x.scalar_type() == at::kFloat || x.scalar_type() == dtype);
}

}  // namespace titan
