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

// A chunk's labels as rows of this weight: `index` (0 where the label is elsewhere) and `here`
// (counted and in this rank's slice of the vocabulary).
struct LocalLabels {
  at::Tensor index;
  at::Tensor here;
};

LocalLabels Localize(const at::Tensor& labels, int64_t first_id, int64_t rows) {
  const at::Tensor index = labels - first_id;
  const at::Tensor here =
      labels.ne(kIgnoreIndex).logical_and(index.ge(0)).logical_and(index.lt(rows));
  return {index.masked_fill(here.logical_not(), 0), here};
}

struct ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& weight, const at::Tensor& labels, int64_t chunk_rows,
                            const VocabShard* shard) {
    const std::optional<at::ScalarType> dtype = AutocastScope::Current(hidden.device().type());
    // The chunks' matmuls cast explicitly; autocast would cast them again.
    AutocastScope no_autocast(hidden.device().type(), std::nullopt);
    const int64_t rows = hidden.size(0);
    const int64_t first_id = shard != nullptr ? shard->first_id : 0;
    at::Tensor lse = at::empty({rows}, hidden.options().dtype(at::kFloat));
    at::Tensor target = at::empty({rows}, hidden.options().dtype(at::kFloat));
    const at::Tensor w = InDtype(weight, dtype);
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t end = std::min(rows, begin + chunk_rows);
      const at::Tensor logits =
          at::mm(InDtype(hidden.slice(0, begin, end), dtype), w.t()).to(at::kFloat);
      const LocalLabels local = Localize(labels.slice(0, begin, end), first_id, weight.size(0));
      lse.slice(0, begin, end).copy_(at::logsumexp(logits, {1}));
      target.slice(0, begin, end)
          .copy_(logits.gather(1, local.index.unsqueeze(1))
                     .squeeze(1)
                     .masked_fill(local.here.logical_not(), 0.0));
    }
    if (shard != nullptr) {
      // log Σ_ranks exp(lse_r), shifted by the largest; the label's logit is on one rank only.
      at::Tensor max = lse.clone();
      shard->all_reduce_max(max);
      at::Tensor sum = (lse - max).exp();
      shard->all_reduce_sum(sum);
      lse = max + sum.log();
      shard->all_reduce_sum(target);
    }
    const at::Tensor total = (lse - target).masked_fill(labels.eq(kIgnoreIndex), 0.0).sum();
    ctx->save_for_backward({hidden, weight, labels, lse});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["first_id"] = first_id;
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
    const int64_t first_id = ctx->saved_data["first_id"].toInt();
    std::optional<at::ScalarType> dtype;
    if (!ctx->saved_data["dtype"].isNone()) {
      dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    }
    // Zero-bubble pipelines ask for hidden's gradient and the weight's in separate passes.
    const bool want_hidden = ctx->needs_input_grad(0);
    const bool want_weight = ctx->needs_input_grad(1);
    const at::Tensor grad = grad_outputs[0].to(at::kFloat);
    const at::Tensor w = InDtype(weight, dtype);
    at::Tensor grad_hidden = want_hidden ? at::empty_like(hidden) : at::Tensor();
    at::Tensor grad_weight =
        want_weight ? at::zeros(weight.sizes(), weight.options().dtype(at::kFloat)) : at::Tensor();
    for (int64_t begin = 0; begin < hidden.size(0) && (want_hidden || want_weight);
         begin += chunk_rows) {
      const int64_t end = std::min(hidden.size(0), begin + chunk_rows);
      const at::Tensor h = InDtype(hidden.slice(0, begin, end), dtype);
      const at::Tensor chunk_labels = labels.slice(0, begin, end);
      const LocalLabels local = Localize(chunk_labels, first_id, weight.size(0));
      // d(lse - target)/dlogits = softmax - one_hot(target), zero on ignored rows.
      at::Tensor dlogits =
          (at::mm(h, w.t()).to(at::kFloat) - lse.slice(0, begin, end).unsqueeze(1)).exp_();
      dlogits.scatter_add_(1, local.index.unsqueeze(1),
                           local.here.to(at::kFloat).neg().unsqueeze(1));
      dlogits.mul_((chunk_labels.ne(kIgnoreIndex).to(at::kFloat) * grad).unsqueeze(1));
      const at::Tensor dlogits_in = dlogits.to(h.scalar_type());
      if (want_hidden) grad_hidden.slice(0, begin, end).copy_(at::mm(dlogits_in, w));
      if (want_weight) grad_weight.add_(at::mm(dlogits_in.t(), h).to(at::kFloat));
    }
    return {grad_hidden, want_weight ? grad_weight.to(weight.scalar_type()) : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor ChunkedLinearCrossEntropySum(const at::Tensor& hidden, const at::Tensor& weight,
                                        const at::Tensor& labels, int64_t chunk_rows,
                                        const VocabShard* shard) {
  return ChunkedCrossEntropy::apply(hidden, weight, labels, chunk_rows, shard);
}

}  // namespace titan
