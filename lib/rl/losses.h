#ifndef TITAN_LIB_RL_LOSSES_H_
#define TITAN_LIB_RL_LOSSES_H_

// The RL objectives as tensor formulas, each checked against an independent Python restatement
// of its published form (losses_reference_test). Per-token tensors are [B, T]; the caller masks
// and normalises (titan's trainer divides summed token losses by the step's counted tokens:
// DAPO's token-level normalisation).

#include <ATen/ATen.h>

#include <functional>
#include <utility>

#include "absl/status/statusor.h"

namespace titan {

// log softmax(logits / temperature) at `labels` ([B, T, V] -> [B, T], fp32); labels outside the
// vocabulary (the ignore index) read id 0, to be masked by the caller.
at::Tensor TokenLogProbs(const at::Tensor& logits, const at::Tensor& labels,
                         double temperature = 1.0);
// Entropy of softmax(logits / temperature) per token, fp32 ([B, T, V] -> [B, T]).
at::Tensor TokenEntropy(const at::Tensor& logits, double temperature = 1.0);

// PPO's clipped surrogate per token, r = exp(logp - old_logp):
// max(-A·r, -A·clip(r, 1 - clip_low, 1 + clip_high)); clip_high > clip_low is DAPO's
// clip-higher. `clipped` (optional out) marks tokens where the clipped term won.
at::Tensor ClippedPolicyLoss(const at::Tensor& logp, const at::Tensor& old_logp,
                             const at::Tensor& advantages, double clip_low, double clip_high,
                             at::Tensor* clipped = nullptr);

// PPO's clipped value loss per token: 0.5·max((v - R)², (clip(v, v_old ± clip) - R)²).
at::Tensor ClippedValueLoss(const at::Tensor& values, const at::Tensor& old_values,
                            const at::Tensor& returns, double clip);

// Generalised advantage estimation over response tokens (`mask` 1 on them, a prefix of each
// row): δ_t = r_t + γ·V_{t+1} - V_t, A_t = δ_t + γλ·A_{t+1}, with V and r zero past the mask;
// returns (advantages, returns = A + V).
std::pair<at::Tensor, at::Tensor> Gae(const at::Tensor& rewards, const at::Tensor& values,
                                      const at::Tensor& mask, double gamma, double lam);

// Sums a tensor over the data-parallel ranks (a collective, which can fail).
using SumOverRanks = std::function<absl::StatusOr<at::Tensor>(const at::Tensor&)>;

// (x - mean) / sqrt(var + 1e-8) over the tokens where `mask` is 1, var with Bessel's correction
// (TRL's masked_whiten); shift_mean=false adds the mean back. With `sum_over_ranks`, the mean and
// variance are the whole batch's across ranks (each rank holding its share of x and mask). Fewer
// than 2 masked values (over the ranks) are a FailedPrecondition error.
at::Tensor Whiten(const at::Tensor& x, const at::Tensor& mask, bool shift_mean = true);
absl::StatusOr<at::Tensor> Whiten(const at::Tensor& x, const at::Tensor& mask, bool shift_mean,
                                  const SumOverRanks& sum_over_ranks);

enum class GroupStd { kPopulation, kBessel, kNone };
// GRPO advantages of `rewards` [N] laid out as consecutive groups of `group_size`:
// (r - mean_group) / (std_group + eps), std by `std` (kNone: r - mean_group); exactly 0 for a
// group whose rewards are all equal.
at::Tensor GroupAdvantages(const at::Tensor& rewards, int64_t group_size, GroupStd std, double eps);

enum class KlEstimator { kK1, kK3 };
// Per-token KL estimate with x = logp - ref_logp: k1 = x, k3 = exp(-x) - 1 + x.
at::Tensor KlPenalty(const at::Tensor& logp, const at::Tensor& ref_logp, KlEstimator estimator);

enum class DpoLossType { kSigmoid, kIpo };
// DPO per pair from sequence-summed log-probabilities, margin
// m = (chosen - ref_chosen) - (rejected - ref_rejected): sigmoid -log σ(β·m) (Rafailov et al.),
// IPO (m - 1/(2β))² (Azar et al.; log-ratios summed over tokens, as OpenRLHF).
at::Tensor DpoLoss(const at::Tensor& chosen, const at::Tensor& rejected,
                   const at::Tensor& ref_chosen, const at::Tensor& ref_rejected, double beta,
                   DpoLossType type);

// Each pair's share of the preference accuracy from its DPO margin: 1 when the chosen response
// gains more over the reference than the rejected one, 0 when less, 1/2 for a tie (a policy
// still equal to its reference), as a coin flip would score.
at::Tensor PreferenceScores(const at::Tensor& margin);

}  // namespace titan

#endif  // TITAN_LIB_RL_LOSSES_H_
