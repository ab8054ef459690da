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

std::optional<at::ScalarType> DtypeFrom(const c10::IValue& saved) {
  if (saved.isNone()) return std::nullopt;
  return static_cast<at::ScalarType>(saved.toInt());
}

c10::IValue SavedDtype(const std::optional<at::ScalarType>& dtype) {
  return dtype ? c10::IValue(static_cast<int64_t>(*dtype)) : c10::IValue();
}

// log Σ_ranks exp(lse_r), shifted by the largest.
at::Tensor CombineOverShards(const at::Tensor& lse, const VocabShard& shard) {
  at::Tensor max = lse.clone();
  shard.all_reduce_max(max);
  at::Tensor sum = (lse - max).exp();
  shard.all_reduce_sum(sum);
  return max + sum.log();
}

// One chunk's share of the gradients, `scale` times d(lse - target)/dlogits = softmax - one_hot:
// hidden's rows written to `grad_hidden` (when defined), the weight's added to `grad_weight`
// (when defined). `logits` (fp32) is consumed.
void ChunkGradients(at::Tensor logits, const at::Tensor& lse, const LocalLabels& local,
                    const at::Tensor& scale, const at::Tensor& h, const at::Tensor& w,
                    at::Tensor grad_hidden, at::Tensor& grad_weight) {
  at::Tensor dlogits = logits.sub_(lse.unsqueeze(1)).exp_();
  dlogits.scatter_add_(1, local.index.unsqueeze(1), local.here.to(at::kFloat).neg().unsqueeze(1));
  dlogits.mul_((local.counted.to(at::kFloat) * scale).unsqueeze(1));
  const at::Tensor dlogits_in = dlogits.to(h.scalar_type());
  if (grad_hidden.defined()) grad_hidden.copy_(at::mm(dlogits_in, w));
  if (grad_weight.defined()) grad_weight.add_(at::mm(dlogits_in.t(), h).to(at::kFloat));
}

// One chunk's logits in fp32, times `logit_scale`: forward and backward compute them alike.
at::Tensor ChunkLogits(const at::Tensor& h, const at::Tensor& w, double logit_scale) {
  at::Tensor logits = at::mm(h, w.t()).to(at::kFloat);
  if (logit_scale != 1.0) logits.mul_(logit_scale);
  return logits;
}

// How the head's logits become the result: the sum of the per-token losses, or each token's.
struct ChunkedOutput {
  bool per_token = false;
  double logit_scale = 1.0;       // the logits are multiplied by it first (1 / temperature)
  at::Tensor* entropy = nullptr;  // set: each row's entropy of the softmax, without autograd
};

struct ChunkedCrossEntropy : public torch::autograd::Function<ChunkedCrossEntropy> {
  // `grads_in_forward`: compute both gradients chunk by chunk now and keep them for backward
  // (which then only scales them); else keep the inputs and recompute each chunk's logits then.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden,
                            const at::Tensor& weight, const at::Tensor& labels, int64_t chunk_rows,
                            const VocabShard* shard, bool grads_in_forward,
                            const ChunkedOutput& output) {
    const std::optional<at::ScalarType> dtype = AutocastScope::Current(hidden.device().type());
    // The chunks' matmuls cast explicitly; autocast would cast them again.
    AutocastScope no_autocast(hidden.device().type(), std::nullopt);
    const int64_t rows = hidden.size(0);
    const int64_t first_id = shard != nullptr ? shard->first_id : 0;
    const auto fp32 = hidden.options().dtype(at::kFloat);
    at::Tensor lse = at::empty({rows}, fp32);
    at::Tensor target = at::empty({rows}, fp32);
    at::Tensor grad_hidden, grad_weight;
    if (grads_in_forward) {
      grad_hidden = at::empty(hidden.sizes(), fp32);
      grad_weight = at::zeros(weight.sizes(), fp32);
    }
    // d(scaled logits)/d(logits): the gradients' factor.
    const at::Tensor unit = at::full({}, output.logit_scale, fp32);
    const at::Tensor w = InDtype(weight, dtype);
    if (output.entropy != nullptr) *output.entropy = at::empty({rows}, fp32);
    for (int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const int64_t end = std::min(rows, begin + chunk_rows);
      const at::Tensor h = InDtype(hidden.slice(0, begin, end), dtype);
      at::Tensor logits = ChunkLogits(h, w, output.logit_scale);
      const LocalLabels local =
          LocalizeLabels(labels.slice(0, begin, end), first_id, weight.size(0));
      at::Tensor chunk_lse = at::logsumexp(logits, {1});
      target.slice(0, begin, end)
          .copy_(logits.gather(1, local.index.unsqueeze(1))
                     .squeeze(1)
                     .masked_fill(local.here.logical_not(), 0.0));
      if (output.entropy != nullptr) {
        // lse - Σ softmax · logits
        output.entropy->slice(0, begin, end)
            .copy_(chunk_lse - (logits - chunk_lse.unsqueeze(1)).exp().mul_(logits).sum(1));
      }
      if (grads_in_forward) {
        // The softmax needs the whole vocabulary's log-sum-exp now: two all-reduces per chunk.
        if (shard != nullptr) chunk_lse = CombineOverShards(chunk_lse, *shard);
        ChunkGradients(logits, chunk_lse, local, unit, h, w, grad_hidden.slice(0, begin, end),
                       grad_weight);
      }
      lse.slice(0, begin, end).copy_(chunk_lse);
    }
    if (shard != nullptr) {
      if (!grads_in_forward) lse = CombineOverShards(lse, *shard);
      shard->all_reduce_sum(target);  // the label's logit is on one rank only
    }
    const at::Tensor per_token = (lse - target).masked_fill(labels.eq(kIgnoreIndex), 0.0);
    const at::Tensor total = output.per_token ? per_token : per_token.sum();
    ctx->saved_data["grads_in_forward"] = grads_in_forward;
    ctx->saved_data["logit_scale"] = output.logit_scale;
    ctx->saved_data["hidden_dtype"] = static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    if (grads_in_forward) {
      ctx->save_for_backward({grad_hidden, grad_weight});
      return total;
    }
    ctx->save_for_backward({hidden, weight, labels, lse});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["first_id"] = first_id;
    ctx->saved_data["dtype"] = SavedDtype(dtype);
    return total;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto hidden_dtype = static_cast<at::ScalarType>(ctx->saved_data["hidden_dtype"].toInt());
    const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    // Zero-bubble pipelines ask for hidden's gradient and the weight's in separate passes.
    const bool want_hidden = ctx->needs_input_grad(0);
    const bool want_weight = ctx->needs_input_grad(1);
    // A scalar (the sum's) or one per token.
    const at::Tensor grad = grad_outputs[0].to(at::kFloat);
    at::Tensor grad_hidden, grad_weight;
    if (ctx->saved_data["grads_in_forward"].toBool()) {
      if (want_hidden) grad_hidden = (saved[0] * grad).to(hidden_dtype);
      if (want_weight) grad_weight = (saved[1] * grad).to(weight_dtype);
      return {grad_hidden,  grad_weight,  at::Tensor(), at::Tensor(),
              at::Tensor(), at::Tensor(), at::Tensor()};
    }
    const at::Tensor& hidden = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor& labels = saved[2];
    const at::Tensor& lse = saved[3];
    const int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const int64_t first_id = ctx->saved_data["first_id"].toInt();
    const std::optional<at::ScalarType> dtype = DtypeFrom(ctx->saved_data["dtype"]);
    const double logit_scale = ctx->saved_data["logit_scale"].toDouble();
    const at::Tensor w = InDtype(weight, dtype);
    if (want_hidden) grad_hidden = at::empty_like(hidden);
    if (want_weight) grad_weight = at::zeros(weight.sizes(), weight.options().dtype(at::kFloat));
    for (int64_t begin = 0; begin < hidden.size(0) && (want_hidden || want_weight);
         begin += chunk_rows) {
      const int64_t end = std::min(hidden.size(0), begin + chunk_rows);
      const at::Tensor h = InDtype(hidden.slice(0, begin, end), dtype);
      const LocalLabels local =
          LocalizeLabels(labels.slice(0, begin, end), first_id, weight.size(0));
      const at::Tensor scale = (grad.dim() == 0 ? grad : grad.slice(0, begin, end)) * logit_scale;
      ChunkGradients(ChunkLogits(h, w, logit_scale), lse.slice(0, begin, end), local, scale, h, w,
                     want_hidden ? grad_hidden.slice(0, begin, end) : at::Tensor(), grad_weight);
    }
    return {grad_hidden,  want_weight ? grad_weight.to(weight_dtype) : at::Tensor(),
            at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor ChunkedLinearCrossEntropySum(const at::Tensor& hidden, const at::Tensor& weight,
                                        const at::Tensor& labels, int64_t chunk_rows,
                                        const VocabShard* shard) {
  // Gradients in the forward when a backward follows and keeping the weight's gradient until then
  // costs no more than the logits would: at least as many tokens as the model has dims.
  const bool backward_follows =
      c10::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  const bool grads_in_forward = backward_follows && hidden.size(0) >= hidden.size(1);
  return ChunkedCrossEntropy::apply(hidden, weight, labels, chunk_rows, shard, grads_in_forward,
                                    ChunkedOutput());
}

at::Tensor ChunkedLinearCrossEntropyPerToken(const at::Tensor& hidden, const at::Tensor& weight,
                                             const at::Tensor& labels, double logit_scale,
                                             int64_t chunk_rows, at::Tensor* entropy) {
  ChunkedOutput output;
  output.per_token = true;
  output.logit_scale = logit_scale;
  output.entropy = entropy;
  // Each token's gradient is known in backward only: the logits are recomputed then.
  return ChunkedCrossEntropy::apply(hidden, weight, labels, chunk_rows, /*shard=*/nullptr,
                                    /*grads_in_forward=*/false, output);
}

}  // namespace titan
