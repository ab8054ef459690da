#include "lib/train/chunked_cross_entropy.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <optional>

#include "lib/model/autocast.h"
#include "lib/train/loss.h"

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The matmul dtype: autocast's when the forward ran under it (backward may run on a thread
// without autocast), else the inputs'.
at::Tensor InDtype(const at::Tensor& t, const std::optional<at::ScalarType>& dtype) {
  return dtype ? t.to(*dtype) : t;
}

struct ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, int64_t chunk_rows) {
    const std::optional<at::ScalarType> dtype = AutocastScope::Current(hidden.device().type());
    // The chunks' matmuls cast explicitly; autocast would cast them again.
    AutocastScope no_autocast(hidden.device().type(), std::nullopt);
    const int64_t rows = hidden.size(0);
    at::Tensor lse = at::empty({rows}, hidden.options().dtype(at::kFloat));
    at::Tensor total = at::zeros({}, hidden.options().dtype(at::kFloat));
    const at::Tensor w = InDtype(weight, dtype);
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t end = std::min(rows, begin + chunk_rows);
      const at::Tensor logits = at::mm(InDtype(hidden.slice(0, begin, end), dtype), w.t()).to(at::kFloat);
      const at::Tensor chunk_labels = labels.slice(0, begin, end);
      const at::Tensor valid = chunk_labels.ne(kIgnoreIndex);
      const at::Tensor chunk_lse = at::logsumexp(logits, {1});
      lse.slice(0, begin, end).copy_(chunk_lse);
      const at::Tensor target = logits.gather(1, chunk_labels.clamp_min(0).unsqueeze(1)).squeeze(1);
      total += ((chunk_lse - target) * valid).sum();
    }
    ctx->save_for_backward({hidden, weight, labels, lse});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["dtype"] = dtype ? c10::IValue(static_cast<int64_t>(*dtype)) : c10::IValue();
    return total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& labels = saved[2];
    const at::Tensor& lse = saved[3];
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    std::optional<at::ScalarType> dtype;
    if (!ctx->saved_data["dtype"].isNone()) {
      dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    }
    const at::Tensor grad = grad_outputs[0].to(at::kFloat);
    const at::Tensor w = InDtype(weight, dtype);
    at::Tensor grad_hidden = at::empty_like(hidden);
    at::Tensor grad_weight = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    for (int64_t begin = 0; begin < hidden.size(0); begin += chunk_rows) {
      const int64_t end = std::min(hidden.size(0), begin + chunk_rows);
      const at::Tensor h = InDtype(hidden.slice(0, begin, end), dtype);
      const at::Tensor chunk_labels = labels.slice(0, begin, end);
      const at::Tensor valid = chunk_labels.ne(kIgnoreIndex);
      // d(lse - target)/dlogits = softmax - one_hot(target), zero on ignored rows.
      at::Tensor dlogits = (at::mm(h, w.t()).to(at::kFloat) - lse.slice(0, begin, end).unsqueeze(1)).exp_();
      dlogits.scatter_add_(1, chunk_labels.clamp_min(0).unsqueeze(1),
                           at::full({end - begin, 1}, -1.0, dlogits.options()));
      dlogits.mul_((valid.to(at::kFloat) * grad).unsqueeze(1));
      const at::Tensor dlogits_in = dlogits.to(h.scalar_type());
      grad_hidden.slice(0, begin, end).copy_(at::mm(dlogits_in, w));
      grad_weight.add_(at::mm(dlogits_in.t(), h).to(at::kFloat));
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ChunkedLinearCrossEntropySum(const at::Tensor& hidden, const at::Tensor& weight,
                                        const at::Tensor& labels, int64_t chunk_rows) {
  return ChunkedCrossEntropy::apply(hidden, weight, labels, chunk_rows);
}

}  // namespace titan
