#include "lib/rl/losses.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace titan {

at::Tensor TokenLogProbs(const at::Tensor& logits, const at::Tensor& labels, double temperature) {
  at::Tensor scaled = logits.to(at::kFloat);
  if (temperature != 1.0) scaled = scaled / temperature;
  const at::Tensor ids = labels.clamp(0, logits.size(-1) - 1).unsqueeze(-1);
  return at::log_softmax(scaled, -1).gather(-1, ids).squeeze(-1);
}

at::Tensor TokenEntropy(const at::Tensor& logits, double temperature) {
  at::Tensor scaled = logits.to(at::kFloat);
  if (temperature != 1.0) scaled = scaled / temperature;
  const at::Tensor logp = at::log_softmax(scaled, -1);
  return -(logp.exp() * logp).sum(-1);
}

at::Tensor ClippedPolicyLoss(const at::Tensor& logp, const at::Tensor& old_logp,
                             const at::Tensor& advantages, double clip_low, double clip_high,
                             at::Tensor* clipped) {
  const at::Tensor ratio = at::exp(logp - old_logp);
  const at::Tensor unclipped_loss = -advantages * ratio;
  const at::Tensor clipped_loss = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high);
  if (clipped != nullptr) *clipped = clipped_loss.gt(unclipped_loss);
  return at::maximum(unclipped_loss, clipped_loss);
}

at::Tensor ClippedValueLoss(const at::Tensor& values, const at::Tensor& old_values,
                            const at::Tensor& returns, double clip) {
  const at::Tensor clipped = old_values + (values - old_values).clamp(-clip, clip);
  return 0.5 * at::maximum((values - returns).square(), (clipped - returns).square());
}

std::pair<at::Tensor, at::Tensor> Gae(const at::Tensor& rewards, const at::Tensor& values,
                                      const at::Tensor& mask, double gamma, double lam) {
  const at::Tensor m = mask.to(values.scalar_type());
  const at::Tensor v = values * m;
  const at::Tensor r = rewards * m;
  const int64_t steps = values.size(1);
  std::vector<at::Tensor> advantages(steps);
  at::Tensor last = at::zeros_like(v.select(1, 0));
  for (int64_t t = steps - 1; t >= 0; --t) {
    const at::Tensor next_value = t + 1 < steps ? v.select(1, t + 1) : at::zeros_like(last);
    const at::Tensor delta = r.select(1, t) + gamma * next_value - v.select(1, t);
    last = delta + gamma * lam * last;
    advantages[t] = last;
  }
  const at::Tensor a = at::stack(advantages, 1);
  return {a, a + v};
}

at::Tensor Whiten(const at::Tensor& x, const at::Tensor& mask, bool shift_mean) {
  return Whiten(x, mask, shift_mean, [](const at::Tensor& local) { return local; }).value();
}

absl::StatusOr<at::Tensor> Whiten(const at::Tensor& x, const at::Tensor& mask, bool shift_mean,
                                  const SumOverRanks& sum_over_ranks) {
  const at::Tensor m = mask.to(x.scalar_type());
  // Two passes (mean, then squared deviations from it), as the one-process formula computes them.
  absl::StatusOr<at::Tensor> totals = sum_over_ranks(at::stack({(x * m).sum(), m.sum()}));
  if (!totals.ok()) return totals.status();
  // Bessel's variance of one value is 0/0: a NaN that would surface as a diverged update.
  const double count = (*totals)[1].item<double>();
  if (count < 2) {
    return absl::FailedPreconditionError(absl::StrCat(
        "whitening needs at least 2 values to estimate a variance (it divides by n - 1, as TRL's "
        "masked_var), got ",
        count));
  }
  const at::Tensor sums = totals->to(x.options());
  const at::Tensor n = sums[1];
  const at::Tensor mean = sums[0] / n;
  absl::StatusOr<at::Tensor> squares = sum_over_ranks(((x - mean).square() * m).sum());
  if (!squares.ok()) return squares.status();
  const at::Tensor var = squares->to(x.options()) / (n - 1);
  at::Tensor whitened = (x - mean) * at::rsqrt(var + 1e-8);
  if (!shift_mean) whitened = whitened + mean;
  return whitened;
}

at::Tensor GroupAdvantages(const at::Tensor& rewards, int64_t group_size, GroupStd std,
                           double eps) {
  const at::Tensor groups = rewards.view({-1, group_size});
  // Exactly 0 for a group of equal rewards, also where their mean rounds or overflows (inf - inf).
  const at::Tensor equal = groups.amax(1, /*keepdim=*/true) == groups.amin(1, /*keepdim=*/true);
  const at::Tensor centred = groups - groups.mean(1, /*keepdim=*/true);
  if (std == GroupStd::kNone) return centred.masked_fill(equal, 0).flatten();
  const at::Tensor sd = groups.std(1, /*correction=*/std == GroupStd::kBessel ? 1 : 0,
                                   /*keepdim=*/true);
  return (centred / (sd + eps)).masked_fill(equal, 0).flatten();
}

at::Tensor KlPenalty(const at::Tensor& logp, const at::Tensor& ref_logp, KlEstimator estimator) {
  const at::Tensor x = logp - ref_logp;
  return estimator == KlEstimator::kK1 ? x : at::exp(-x) - 1 + x;
}

at::Tensor DpoLoss(const at::Tensor& chosen, const at::Tensor& rejected,
                   const at::Tensor& ref_chosen, const at::Tensor& ref_rejected, double beta,
                   DpoLossType type) {
  const at::Tensor margin = (chosen - ref_chosen) - (rejected - ref_rejected);
  if (type == DpoLossType::kIpo) return (margin - 1.0 / (2.0 * beta)).square();
  return -at::log_sigmoid(beta * margin);
}

at::Tensor PreferenceScores(const at::Tensor& margin) {
  return margin.gt(0).to(at::kDouble) + 0.5 * margin.eq(0).to(at::kDouble);
}

}  // namespace titan
