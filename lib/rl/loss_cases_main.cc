// Writes random inputs and titan's RL losses and advantages on them to one safetensors file, for
// losses_reference_test.py to recompute in Python. usage: loss_cases OUT.safetensors
#include <iostream>
#include <limits>
#include <string>
#include <utility>

#include "lib/checkpoint/safetensors.h"
#include "lib/rl/losses.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: loss_cases OUT.safetensors\n";
    return 2;
  }
  using namespace titan;
  at::manual_seed(0);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  NamedTensors out;
  auto add = [&](const std::string& name, const at::Tensor& t) { out.emplace_back(name, t); };
  // Ratios spread around the clip range, advantages of both signs.
  const at::Tensor logp = at::randn({6, 9}, f64) * 0.3;
  const at::Tensor old_logp = at::randn({6, 9}, f64) * 0.3;
  const at::Tensor adv = at::randn({6, 9}, f64);
  add("logp", logp);
  add("old_logp", old_logp);
  add("advantages", adv);
  at::Tensor clipped;
  add("policy_loss_sym", ClippedPolicyLoss(logp, old_logp, adv, 0.2, 0.2, &clipped));
  add("policy_clipped_sym", clipped.to(at::kDouble));
  add("policy_loss_higher", ClippedPolicyLoss(logp, old_logp, adv, 0.2, 0.28, &clipped));
  add("policy_clipped_higher", clipped.to(at::kDouble));
  const at::Tensor values = at::randn({6, 9}, f64);
  const at::Tensor old_values = values + at::randn({6, 9}, f64) * 0.3;
  const at::Tensor returns = at::randn({6, 9}, f64);
  add("values", values);
  add("old_values", old_values);
  add("returns", returns);
  add("value_loss", ClippedValueLoss(values, old_values, returns, 0.2));
  // Response masks: a prefix of each row, lengths 1..9.
  const at::Tensor lengths = at::tensor({9, 1, 4, 7, 2, 5}, at::kLong);
  const at::Tensor mask = (at::arange(9).unsqueeze(0) < lengths.unsqueeze(1)).to(at::kDouble);
  const at::Tensor rewards = at::randn({6, 9}, f64);
  add("mask", mask);
  add("rewards", rewards);
  auto [gae_adv, gae_ret] = Gae(rewards, values, mask, 0.99, 0.95);
  add("gae_advantages", gae_adv);
  add("gae_returns", gae_ret);
  add("whitened", Whiten(gae_adv, mask));
  add("whitened_keep_mean", Whiten(gae_adv, mask, /*shift_mean=*/false));
  const at::Tensor scores = at::randint(0, 3, {4 * 5}, f64);  // ties and equal groups occur
  add("group_rewards", scores);
  add("grpo_population", GroupAdvantages(scores, 5, GroupStd::kPopulation, 1e-6));
  add("grpo_bessel", GroupAdvantages(scores, 5, GroupStd::kBessel, 1e-4));
  add("grpo_none", GroupAdvantages(scores, 5, GroupStd::kNone, 0));
  // Equal groups whose mean rounds (0.1), overflows (1e308) or is inf - inf (fp32 overflow).
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor equal = at::tensor({0.1, 0.1, 0.1, 1e308, 1e308, 1e308, inf, inf, inf}, f64);
  add("grpo_equal_population", GroupAdvantages(equal, 3, GroupStd::kPopulation, 1e-6));
  add("grpo_equal_none", GroupAdvantages(equal, 3, GroupStd::kNone, 0));
  const at::Tensor ref_logp = logp + at::randn({6, 9}, f64) * 0.5;
  add("ref_logp", ref_logp);
  add("kl_k1", KlPenalty(logp, ref_logp, KlEstimator::kK1));
  add("kl_k3", KlPenalty(logp, ref_logp, KlEstimator::kK3));
  const at::Tensor chosen = at::randn({8}, f64) * 5 - 20;
  const at::Tensor rejected = at::randn({8}, f64) * 5 - 20;
  const at::Tensor ref_chosen = chosen + at::randn({8}, f64);
  const at::Tensor ref_rejected = rejected + at::randn({8}, f64);
  add("chosen", chosen);
  add("rejected", rejected);
  add("ref_chosen", ref_chosen);
  add("ref_rejected", ref_rejected);
  add("dpo_sigmoid", DpoLoss(chosen, rejected, ref_chosen, ref_rejected, 0.1, DpoLossType::kSigmoid));
  add("dpo_ipo", DpoLoss(chosen, rejected, ref_chosen, ref_rejected, 0.1, DpoLossType::kIpo));
  // Token log-probabilities and entropy (fp32, as the trainer computes them).
  const at::Tensor logits = at::randn({2, 5, 11}) * 3;
  const at::Tensor labels = at::randint(11, {2, 5}, at::kLong);
  add("logits", logits);
  add("labels", labels);
  add("token_logp_t07", TokenLogProbs(logits, labels, 0.7));
  add("token_entropy", TokenEntropy(logits));
  const absl::Status status = WriteSafetensors(argv[1], out);
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  return 0;
}
