// RlTrainer's updates: policy-gradient steps on rollouts (GRPO, DAPO, PPO with its value head),
// SFT and DPO steps on examples.
#include <ATen/ATen.h>  // before glog: LibTorch defines its own LOG, which hides glog's lines
#include <c10/core/GradMode.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "lib/metrics/flops.h"
#include "lib/profiling/phase_range.h"
#include "lib/rl/losses.h"
#include "lib/rl/rl_config.h"
#include "lib/rl/rl_trainer.h"
#include "lib/train/grad_clip.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Sums over response tokens or sequences (and maxima) that become the step's metrics once
// reduced over ranks. They stay on the device until the step ends: reading each on the host per
// microbatch made the host wait for the forward before it could queue the backward.
class Tally {
 public:
  using Reducer = std::function<absl::StatusOr<at::Tensor>(const at::Tensor&, ReduceOp)>;

  void Add(const std::string& name, const at::Tensor& value) { Fold(name, value, false); }
  void Max(const std::string& name, const at::Tensor& value) { Fold(name, value, true); }

  // Every entry over the ranks, on the host: one `reduce` (a read and a collective) per kind.
  absl::StatusOr<absl::flat_hash_map<std::string, double>> Totals(const Reducer& reduce) const {
    absl::flat_hash_map<std::string, double> totals;
    for (const bool max : {false, true}) {
      std::vector<const Entry*> kind;
      std::vector<at::Tensor> values;
      for (const Entry& e : entries_) {
        if (e.max != max) continue;
        kind.push_back(&e);
        values.push_back(e.value);
      }
      if (kind.empty()) continue;
      TITAN_ASSIGN_OR_RETURN(const at::Tensor reduced,
                             reduce(at::stack(values), max ? ReduceOp::kMax : ReduceOp::kSum));
      for (size_t i = 0; i < kind.size(); ++i) {
        totals[kind[i]->name] = reduced[static_cast<int64_t>(i)].item<double>();
      }
    }
    return totals;
  }

 private:
  struct Entry {
    std::string name;
    at::Tensor value;  // 0-dim double, on the device
    bool max;
  };

  void Fold(const std::string& name, const at::Tensor& value, bool max) {
    const at::Tensor v = value.detach().to(at::kDouble);
    for (Entry& e : entries_) {
      if (e.name == name) {
        e.value = max ? at::maximum(e.value, v) : e.value + v;
        return;
      }
    }
    entries_.push_back({name, v, max});
  }

  std::vector<Entry> entries_;
};

}  // namespace

absl::StatusOr<at::Tensor> RlTrainer::OptimizerStep(
    int64_t microbatches, const std::function<absl::StatusOr<at::Tensor>(int64_t)>& loss_sum,
    double denominator) {
  // Gradients are averaged over ranks: each scales its sum by dp_size / denominator.
  const double per_rank = denominator / setup_.dp_size;
  optimizer_->ZeroGrad();
  if (critic_optimizer_) critic_optimizer_->ZeroGrad();
  for (int64_t m = 0; m < microbatches; ++m) {
    // Trace ranges named as titan_train's, so its trace tools read both.
    absl::StatusOr<at::Tensor> sum;
    {
      PhaseRange range("forward");
      sum = loss_sum(m);
    }
    TITAN_RETURN_IF_ERROR(sum.status());
    PhaseRange range("backward");
    policy_.data_parallel->BeginBackward(m + 1 == microbatches);
    (*sum / per_rank).backward();
  }
  TITAN_RETURN_IF_ERROR(policy_.data_parallel->FinishBackward());
  std::vector<at::Tensor> tensors;
  for (const ParamRef& p : policy_.params) tensors.push_back(*p.tensor);
  const GradClip clip = ComputeGradClip(tensors, config_.training().max_norm(), grad_norm_reducer_);
  // As titan_train's: the steps alone, not the gradients' last reduction or their clipping.
  PhaseRange range("optimizer");
  const double factor = schedule_->Factor(state_.lr_step);
  optimizer_->SetLrFactor(factor);
  optimizer_->Step(clip.scale);
  if (critic_optimizer_) {
    if (setup_.dp_size > 1) {
      at::Tensor grad = value_head_.mutable_grad();
      TITAN_RETURN_IF_ERROR(Await(runtime_.comm(MeshGroup::kDp).AllReduce(grad, ReduceOp::kSum)));
      grad.div_(setup_.dp_size);
    }
    const GradClip critic_clip =
        ComputeGradClip({value_head_}, config_.training().max_norm(), nullptr);
    critic_optimizer_->SetLrFactor(factor);
    critic_optimizer_->Step(critic_clip.scale);
  }
  return clip.total_norm;
}

double RlTrainer::StepLr() const {
  return config_.optimizer().lr() * schedule_->Factor(state_.lr_step);
}

std::vector<double> RlTrainer::OverlongPenalized(const Rollouts& rollouts) const {
  std::vector<double> rewards = rollouts.rewards;
  if (rl_.overlong_buffer_len() == 0) return rewards;
  // DAPO's soft overlong punishment over the last overlong_buffer_len tokens: linear up to the
  // full factor at max_new_tokens, and no more beyond (a response given to --step_rollouts may be
  // longer than max_new_tokens).
  const double buffer = rl_.overlong_buffer_len();
  const double start = rl_.max_new_tokens() - buffer;
  for (size_t i = 0; i < rewards.size(); ++i) {
    const double over = std::min(rollouts.responses[i].size() - start, buffer);
    if (over > 0) rewards[i] -= rl_.overlong_penalty_factor() * over / buffer;
  }
  return rewards;
}

absl::StatusOr<StepMetrics> RlTrainer::RlUpdate(const Rollouts& rollouts) {
  const JobConfig::Rl& rl = rl_;
  const bool ppo = rl.algorithm() == "ppo";
  const int64_t rows = static_cast<int64_t>(rollouts.prompts.size());
  const int64_t response_len =
      rollouts.generator_logprobs.defined() ? rollouts.generator_logprobs.size(1) : 0;
  Stopwatch stopwatch;
  const SequenceBatch batch = LayOutSequences(rollouts.prompts, rollouts.responses,
                                              tokenizer_->eos_id(), setup_.device, response_len);
  const at::Tensor mask = batch.response_mask.to(at::kFloat);
  // In double: float32's range holds a reward, not its square, nor a batch's sum of them.
  const at::Tensor rewards = at::tensor(OverlongPenalized(rollouts), at::kDouble).to(setup_.device);
  // -1, left out or spelled out (config.toml spells it out): the whole batch.
  const int64_t minibatch =
      rl.minibatch_size() == -1 ? rows : std::min<int64_t>(rl.minibatch_size(), rows);
  at::Tensor old_logp, ref_logp, old_values;
  // The trainer's log-probabilities and entropies of every row before the update, where
  // logprob_diff_max and entropy need them: rows past the first minibatch are only scored after
  // its optimizer step (a whole-batch forward below runs whenever there are several minibatches).
  at::Tensor trainer_logp, pre_update_entropy;
  at::Tensor* const entropy_out = minibatch < rows ? &pre_update_entropy : nullptr;
  // The generator's log-probabilities are the behaviour policy's (same model, its decode kernels)
  // unless [rl] old_logprobs asks for the trainer's.
  if (rollouts.generator_logprobs.defined() && rl.old_logprobs() == "generator") {
    old_logp = rollouts.generator_logprobs.to(setup_.device);
    if (ppo || minibatch < rows) {
      TITAN_ASSIGN_OR_RETURN(
          const at::Tensor logp,
          ResponseLogProbsNoGrad(policy_, batch, ppo ? &old_values : nullptr, entropy_out));
      if (minibatch < rows) trainer_logp = logp;
    }
  } else {
    TITAN_ASSIGN_OR_RETURN(
        old_logp, ResponseLogProbsNoGrad(policy_, batch, ppo ? &old_values : nullptr, entropy_out));
  }
  if (reference_) {
    TITAN_ASSIGN_OR_RETURN(ref_logp, ResponseLogProbsNoGrad(*reference_, batch));
  }
  const KlEstimator estimator = KlEstimatorFromConfig(rl_);
  at::Tensor advantages, returns;
  at::Tensor loss_mask = mask;
  if (ppo) {
    // RLHF reward shaping (TRL's PPO): -kl_coef·KL per token, the score on the last token.
    at::Tensor token_rewards = at::zeros_like(mask);
    if (reference_) token_rewards = -rl.kl_coef() * KlPenalty(old_logp, ref_logp, estimator) * mask;
    const at::Tensor last = (mask.sum(1).to(at::kLong) - 1).clamp_min(0);
    token_rewards.scatter_add_(1, last.unsqueeze(1), rewards.to(at::kFloat).unsqueeze(1));
    std::tie(advantages, returns) = Gae(token_rewards, old_values, mask, rl.gamma(), rl.lam());
    if (rl.whiten_advantages()) {
      // Over the global batch: per-rank statistics would make the update depend on the ranks.
      absl::StatusOr<at::Tensor> whitened =
          Whiten(advantages, mask, /*shift_mean=*/true,
                 [this](const at::Tensor& local) { return ReduceOverDp(local, ReduceOp::kSum); });
      if (absl::IsFailedPrecondition(whitened.status())) {
        // One response token in the whole batch: refused rather than trained on NaN advantages.
        return absl::FailedPreconditionError(absl::StrCat(
            "PPO advantages over the batch's response tokens: ", whitened.status().message(),
            "; [rl] whiten_advantages = false trains on such a batch"));
      }
      if (!whitened.ok()) return whitened.status();
      advantages = *whitened * mask;
    }
  } else {
    if (rows % rl.group_size() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(rows, " rollouts do not split into groups of ",
                                                     rl.group_size()));
    }
    const at::Tensor seq_adv =
        GroupAdvantages(rewards, rl.group_size(), GroupStdFromConfig(rl_), rl.advantage_eps())
            .to(at::kFloat);
    advantages = seq_adv.unsqueeze(1) * mask;
    if (rl.dynamic_sampling()) {
      // Groups whose rewards are all equal carry no signal (DAPO): their tokens do not count.
      const at::Tensor groups = rewards.view({-1, rl.group_size()});
      const at::Tensor informative = (groups.amax(1) > groups.amin(1))
                                         .repeat_interleave(rl.group_size())
                                         .to(at::kFloat);
      loss_mask = mask * informative.unsqueeze(1);
    }
  }
  Tally tally;
  tally.Add("response_tokens", mask.sum());
  tally.Add("sequences", at::scalar_tensor(static_cast<double>(rows), mask.options()));
  // Squares of the deviations from the batch's mean (all ranks'): E[x²] - mean² loses a small
  // spread around a large mean (1e8 + 0 or 1 gave a std of 0), even in double.
  const at::Tensor local_totals =
      at::stack({rewards.sum().cpu(), at::scalar_tensor(static_cast<double>(rows), at::kDouble)});
  TITAN_ASSIGN_OR_RETURN(const at::Tensor batch_totals, ReduceOverDp(local_totals, ReduceOp::kSum));
  const double reward_mean = batch_totals[0].item<double>() / batch_totals[1].item<double>();
  tally.Add("reward_deviation_sq_sum", (rewards - reward_mean).square().sum());
  tally.Add("counted_tokens", loss_mask.sum());
  if (ppo) {
    // Explained variance of the rollout-time values, over response tokens.
    tally.Add("returns_sum", (returns * mask).sum());
    tally.Add("returns_sq_sum", (returns.square() * mask).sum());
    tally.Add("residual_sum", ((returns - old_values) * mask).sum());
    tally.Add("residual_sq_sum", ((returns - old_values).square() * mask).sum());
  }
  // Masked entries count as 0: a batch whose tokens were all dropped has none.
  const auto diff_max = [](const at::Tensor& logp, const at::Tensor& old, const at::Tensor& lm) {
    return (logp.detach() - old).abs().masked_fill(lm.to(at::kBool).logical_not(), 0).amax();
  };
  const int64_t micro = std::min<int64_t>(config_.training().local_batch_size(), minibatch);
  // Each minibatch's counted tokens over the ranks, read once for every epoch.
  std::vector<at::Tensor> minibatch_tokens;
  for (int64_t begin = 0; begin < rows; begin += minibatch) {
    minibatch_tokens.push_back(loss_mask.slice(0, begin, std::min(rows, begin + minibatch)).sum());
  }
  TITAN_ASSIGN_OR_RETURN(const at::Tensor counted_tokens,
                         ReduceOverDp(at::stack(minibatch_tokens), ReduceOp::kSum));
  // Over counted tokens only (none when dynamic sampling dropped every group, on every rank).
  if (counted_tokens.sum().item<double>() > 0) {
    if (trainer_logp.defined()) {
      tally.Max("logprob_diff_max", diff_max(trainer_logp, old_logp, loss_mask));
    }
    if (pre_update_entropy.defined())
      tally.Add("entropy_sum", (pre_update_entropy * loss_mask).sum());
  }
  // The update's metrics are means over its optimizer steps (every epoch and minibatch), as TRL's
  // PPO and verl report them; each step's metric is its token mean.
  at::Tensor grad_norm_sum;
  int64_t optimizer_steps = 0;
  int64_t trained_tokens = 0;  // this rank's, every epoch's: the update's FLOPs
  bool diff_measured = trainer_logp.defined();  // logprob_diff_max's rows are all taken
  for (int64_t epoch = 0; epoch < rl.ppo_epochs(); ++epoch) {
    for (int64_t begin = 0; begin < rows; begin += minibatch) {
      const int64_t end = std::min(rows, begin + minibatch);
      const double counted = counted_tokens[begin / minibatch].item<double>();
      if (counted == 0) continue;  // every group of this minibatch was dropped, on every rank
      for (int64_t i = begin; i < end; ++i) {
        trained_tokens +=
            static_cast<int64_t>(rollouts.prompts[i].size() + rollouts.responses[i].size());
      }
      const bool first = epoch == 0;
      // Local sums over this step's global token count: summed over ranks, the step's token mean.
      const auto step_mean = [&](const std::string& name, const at::Tensor& sum) {
        tally.Add(name, sum.detach() / counted);
      };
      auto loss_sum = [&](int64_t m) -> absl::StatusOr<at::Tensor> {
        const int64_t a = begin + m * micro, b = std::min(end, a + micro);
        const SequenceBatch part = batch.Rows(a, b);
        at::Tensor values, entropy;
        const bool measure_entropy = first && !pre_update_entropy.defined();
        const at::Tensor logp = ResponseLogProbs(policy_, part, ppo ? &values : nullptr,
                                                 measure_entropy ? &entropy : nullptr);
        const at::Tensor lm = loss_mask.slice(0, a, b);
        at::Tensor clipped;
        const at::Tensor old = old_logp.slice(0, a, b);
        at::Tensor per_token = ClippedPolicyLoss(logp, old, advantages.slice(0, a, b),
                                                 rl.clip_range(), rl.clip_range_high(), &clipped);
        {
          c10::NoGradGuard no_grad;
          step_mean("policy_loss", (per_token * lm).sum());
          step_mean("clip_fraction", (clipped.to(at::kFloat) * lm).sum());
        }
        if (first) {
          // The policy the rollouts were scored under (verl's actor/entropy comes from its
          // old-log-prob forward): with one minibatch, this first epoch's, saving a softmax.
          c10::NoGradGuard no_grad;
          if (measure_entropy) tally.Add("entropy_sum", (entropy * lm).sum());
          if (!diff_measured) {
            // Before any update of this batch (its first counted minibatch, unless measured on
            // every row above): the trainer's log-probabilities against the old
            // ones the ratio uses (0 with the generator's in batch-invariant mode, or with the
            // trainer's, which later minibatches' rows then equal: the PPO ratio is exactly 1).
            tally.Max("logprob_diff_max", diff_max(logp, old, lm));
          }
        }
        if (reference_ && !ppo) {
          const at::Tensor kl = KlPenalty(logp, ref_logp.slice(0, a, b), estimator);
          per_token = per_token + rl.kl_coef() * kl;
          step_mean("kl", (kl.detach() * lm).sum());
        } else if (reference_) {
          step_mean("kl",
                    (KlPenalty(logp.detach(), ref_logp.slice(0, a, b), estimator) * lm).sum());
        }
        if (ppo) {
          const at::Tensor value_loss = ClippedValueLoss(values, old_values.slice(0, a, b),
                                                         returns.slice(0, a, b),
                                                         rl.value_clip_range());
          per_token = per_token + rl.vf_coef() * value_loss;
          step_mean("value_loss", (value_loss.detach() * lm).sum());
        }
        return (per_token * lm).sum();
      };
      const int64_t microbatches = (end - begin + micro - 1) / micro;
      TITAN_ASSIGN_OR_RETURN(const at::Tensor grad_norm,
                             OptimizerStep(microbatches, loss_sum, counted));
      grad_norm_sum = grad_norm_sum.defined() ? grad_norm_sum + grad_norm : grad_norm;
      ++optimizer_steps;
      diff_measured = true;
    }
  }
  // Metrics: sums (and the maximum) over ranks, then ratios.
  const Tally::Reducer over_dp = [this](const at::Tensor& v, ReduceOp op) {
    return ReduceOverDp(v, op);
  };
  TITAN_ASSIGN_OR_RETURN(const auto totals, tally.Totals(over_dp));
  auto get = [&](const std::string& name) {
    const auto it = totals.find(name);
    return it == totals.end() ? 0.0 : it->second;
  };
  StepMetrics metrics;
  const double tokens = std::max(1.0, get("counted_tokens"));
  const double n = std::max(1.0, get("sequences"));
  const double steps = std::max<int64_t>(1, optimizer_steps);
  auto step_average = [&](const std::string& name) { return get(name) / steps; };
  // Without an optimizer step (dynamic sampling dropped every group) the logs leave out loss,
  // grad_norm, tps, tflops and mfu; add_measured below leaves out the update's other metrics.
  metrics.updated = optimizer_steps > 0;
  metrics.loss = step_average("policy_loss") + rl.kl_coef() * (ppo ? 0 : step_average("kl")) +
                 rl.vf_coef() * step_average("value_loss");
  // verl's actor/grad_norm: the mean over the optimizer steps (each step's norm before clipping).
  metrics.grad_norm = grad_norm_sum.defined() ? grad_norm_sum.item<double>() / steps : 0.0;
  metrics.lr = StepLr();
  // A metric whose total nothing measured is left out: when dynamic sampling dropped every group
  // there are no optimizer steps and no counted tokens (an entropy of 0 would read as a
  // deterministic policy, a policy_loss of 0 as a measured one).
  const auto add_measured = [&](const std::string& name, const std::string& total, double per) {
    if (totals.contains(total)) metrics.extra.emplace_back(name, get(total) / per);
  };
  metrics.extra = {
      {"reward_mean", reward_mean},
      {"reward_std", std::sqrt(get("reward_deviation_sq_sum") / n)},
  };
  add_measured("policy_loss", "policy_loss", steps);
  add_measured("clip_fraction", "clip_fraction", steps);
  metrics.extra.emplace_back("response_length", get("response_tokens") / n);
  metrics.extra.emplace_back("optimizer_steps", static_cast<double>(optimizer_steps));
  add_measured("entropy", "entropy_sum", tokens);
  add_measured("logprob_diff_max", "logprob_diff_max", 1);
  if (reference_) add_measured("kl", "kl", steps);
  if (!ppo) {
    metrics.extra.emplace_back("counted_fraction", get("counted_tokens") /
                                                       std::max(1.0, get("response_tokens")));
  }
  SetThroughput(SequenceTokens(rollouts.prompts, rollouts.responses), trained_tokens,
                batch.tokens.size(1), stopwatch.Lap(), rollouts.seconds, metrics);
  if (ppo) {
    const double rt = std::max(1.0, get("response_tokens"));
    const double var_returns = get("returns_sq_sum") / rt - std::pow(get("returns_sum") / rt, 2);
    const double var_residual = get("residual_sq_sum") / rt - std::pow(get("residual_sum") / rt, 2);
    add_measured("value_loss", "value_loss", steps);
    metrics.extra.emplace_back("explained_variance",
                               var_returns > 0 ? 1 - var_residual / var_returns : 0.0);
  }
  return metrics;
}

absl::StatusOr<StepMetrics> RlTrainer::SftOrDpoStep(const std::vector<const RlExample*>& examples) {
  const JobConfig::Rl& rl = rl_;
  const bool dpo = rl.algorithm() == "dpo";
  const int64_t pairs = static_cast<int64_t>(examples.size());
  Stopwatch stopwatch;
  std::vector<TokenIds> prompts, responses;
  int64_t cut = 0;
  // DPO rows: every chosen response, then every rejected one, microbatched pair-wise below.
  for (int pass = 0; pass < (dpo ? 2 : 1); ++pass) {
    for (const RlExample* e : examples) {
      prompts.push_back(EncodePrompt(e->prompt));
      responses.push_back(FitResponse(
          prompts.back(), EncodeResponse(pass == 0 ? e->response : e->rejected, /*add_eos=*/true),
          &cut));
    }
  }
  if (cut > 0) {
    LOG(WARNING) << rl.algorithm() << " step: " << cut << " of " << responses.size()
                 << " responses on this rank cut to fit [rl] max_seq_len = " << rl.max_seq_len()
                 << " (prompt + response tokens; their start is kept, as TRL's max_length)";
  }
  const SequenceBatch batch =
      LayOutSequences(prompts, responses, tokenizer_->eos_id(), setup_.device);
  const at::Tensor mask = batch.response_mask.to(at::kFloat);
  at::Tensor ref_sums;
  if (dpo) {
    TITAN_ASSIGN_OR_RETURN(const at::Tensor ref_logp, ResponseLogProbsNoGrad(*reference_, batch));
    ref_sums = (ref_logp * mask).sum(1);
  }
  TITAN_ASSIGN_OR_RETURN(
      const at::Tensor local,
      ReduceOverDp(dpo ? at::scalar_tensor(static_cast<double>(pairs), at::kDouble) : mask.sum(),
                   ReduceOp::kSum));
  const double denominator = local.item<double>();
  const int64_t micro = std::min<int64_t>(config_.training().local_batch_size(), pairs);
  const DpoLossType type = rl.dpo_loss() == "ipo" ? DpoLossType::kIpo : DpoLossType::kSigmoid;
  Tally tally;
  auto loss_sum = [&](int64_t m) -> absl::StatusOr<at::Tensor> {
    const int64_t a = m * micro, b = std::min(pairs, a + micro);
    if (!dpo) {
      const SequenceBatch part = batch.Rows(a, b);
      const at::Tensor loss = -(ResponseLogProbs(policy_, part) * mask.slice(0, a, b)).sum();
      tally.Add("loss_sum", loss);
      return loss;
    }
    // Chosen rows [a, b) and their rejected rows [pairs + a, pairs + b) in one forward.
    SequenceBatch part = batch.Rows(a, b);
    const SequenceBatch rejected = batch.Rows(pairs + a, pairs + b);
    part.tokens = at::cat({part.tokens, rejected.tokens});
    part.valid = at::cat({part.valid, rejected.valid});
    part.positions = at::cat({part.positions, rejected.positions});
    part.response_mask = at::cat({part.response_mask, rejected.response_mask});
    const at::Tensor sums =
        (ResponseLogProbs(policy_, part) * part.response_mask.to(at::kFloat)).sum(1);
    const int64_t k = b - a;
    const at::Tensor ref_c = ref_sums.slice(0, a, b), ref_r = ref_sums.slice(0, pairs + a, pairs + b);
    const at::Tensor losses = DpoLoss(sums.slice(0, 0, k), sums.slice(0, k, 2 * k), ref_c, ref_r,
                                      rl.beta(), type);
    const at::Tensor margin =
        ((sums.slice(0, 0, k) - ref_c) - (sums.slice(0, k, 2 * k) - ref_r)).detach();
    tally.Add("correct", PreferenceScores(margin).sum());
    tally.Add("margin_sum", margin.sum());
    tally.Add("loss_sum", losses.sum());
    return losses.sum();
  };
  const int64_t microbatches = (pairs + micro - 1) / micro;
  TITAN_ASSIGN_OR_RETURN(const at::Tensor grad_norm,
                         OptimizerStep(microbatches, loss_sum, denominator));
  const Tally::Reducer over_dp = [this](const at::Tensor& v, ReduceOp op) {
    return ReduceOverDp(v, op);
  };
  TITAN_ASSIGN_OR_RETURN(const auto totals, tally.Totals(over_dp));
  StepMetrics metrics;
  metrics.loss = totals.at("loss_sum") / std::max(1.0, denominator);
  metrics.grad_norm = grad_norm.item<double>();
  metrics.lr = StepLr();
  if (dpo) {
    metrics.extra = {{"preference_accuracy", totals.at("correct") / denominator},
                     {"reward_margin", rl.beta() * totals.at("margin_sum") / denominator}};
  } else {
    metrics.extra = {{"response_tokens", denominator}};
  }
  const int64_t tokens = SequenceTokens(prompts, responses);
  SetThroughput(tokens, tokens, batch.tokens.size(1), stopwatch.Lap(), /*earlier_seconds=*/0,
                metrics);
  return metrics;
}

}  // namespace titan
