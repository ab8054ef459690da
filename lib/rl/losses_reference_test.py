"""titan's RL losses and advantages against Python restatements of the published formulas.

Each reference below is written from its paper / library documentation, not from titan's code:
PPO (Schulman et al. 2017) clipped surrogate and DAPO clip-higher (Yu et al. 2025); PPO value
clipping and TRL's masked_whiten; GAE (Schulman et al. 2016) as a per-row backward recursion in
plain Python; GRPO group advantages (Shao et al. 2024) with population and Bessel std (numpy);
Schulman's k1/k3 KL estimators; DPO (Rafailov et al. 2023) and IPO (Azar et al. 2023).
Tolerance 1e-6 (absolute; the inputs are float64, so the actual differences are rounding-level).
usage: losses_reference_test.py LOSS_CASES_BINARY
"""
import math
import subprocess
import sys
import tempfile

import numpy as np
from safetensors.numpy import load_file

TOL = 1e-6


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/cases.safetensors"
        subprocess.run([sys.argv[1], path], check=True)
        c = load_file(path)
    worst = {}

    def check(name, expected):
        diff = float(np.max(np.abs(np.asarray(expected, dtype=np.float64) - c[name])))
        worst[name] = diff
        assert diff <= TOL, f"{name}: max difference {diff} > {TOL}"

    logp, old, adv = c["logp"], c["old_logp"], c["advantages"]
    for suffix, lo, hi in (("sym", 0.2, 0.2), ("higher", 0.2, 0.28)):
        loss = np.zeros_like(logp)
        clipped = np.zeros_like(logp)
        for idx in np.ndindex(logp.shape):
            r = math.exp(logp[idx] - old[idx])
            a = adv[idx]
            unclipped = -a * r
            clip = -a * min(max(r, 1 - lo), 1 + hi)
            loss[idx] = max(unclipped, clip)
            clipped[idx] = 1.0 if clip > unclipped else 0.0
        check(f"policy_loss_{suffix}", loss)
        check(f"policy_clipped_{suffix}", clipped)

    v, v_old, ret = c["values"], c["old_values"], c["returns"]
    v_clip = v_old + np.clip(v - v_old, -0.2, 0.2)
    check("value_loss", 0.5 * np.maximum((v - ret) ** 2, (v_clip - ret) ** 2))

    mask, rewards = c["mask"], c["rewards"]
    gamma, lam = 0.99, 0.95
    adv_ref = np.zeros_like(v)
    for row in range(v.shape[0]):
        n = int(mask[row].sum())
        last = 0.0
        for t in reversed(range(n)):
            next_v = v[row, t + 1] if t + 1 < n else 0.0
            delta = rewards[row, t] + gamma * next_v - v[row, t]
            last = delta + gamma * lam * last
            adv_ref[row, t] = last
    check("gae_advantages", adv_ref * mask)
    check("gae_returns", (adv_ref + v) * mask)
    sel = c["gae_advantages"][mask == 1]
    mean, var = sel.mean(), sel.var(ddof=1)
    check("whitened", ((c["gae_advantages"] - mean) / math.sqrt(var + 1e-8)) * mask
          + c["whitened"] * (1 - mask))
    check("whitened_keep_mean", ((c["gae_advantages"] - mean) / math.sqrt(var + 1e-8) + mean) * mask
          + c["whitened_keep_mean"] * (1 - mask))

    groups = c["group_rewards"].reshape(-1, 5)
    centred = groups - groups.mean(axis=1, keepdims=True)
    check("grpo_population", (centred / (groups.std(axis=1, ddof=0, keepdims=True) + 1e-6)).ravel())
    check("grpo_bessel", (centred / (groups.std(axis=1, ddof=1, keepdims=True) + 1e-4)).ravel())
    check("grpo_none", centred.ravel())
    # A group of equal rewards carries no signal: 0, not the rounding or NaN of its arithmetic.
    check("grpo_equal_population", np.zeros(9))
    check("grpo_equal_none", np.zeros(9))

    x = logp - c["ref_logp"]
    check("kl_k1", x)
    ratio = np.exp(c["ref_logp"] - logp)  # q/p with q the reference
    check("kl_k3", (ratio - 1) - np.log(ratio))

    beta = 0.1
    margin = (c["chosen"] - c["ref_chosen"]) - (c["rejected"] - c["ref_rejected"])
    check("dpo_sigmoid", np.log1p(np.exp(-beta * margin)))
    check("dpo_ipo", (margin - 1 / (2 * beta)) ** 2)

    logits = c["logits"].astype(np.float64) / 0.7
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    picked = np.take_along_axis(logits, c["labels"][..., None], -1)[..., 0]
    check("token_logp_t07", picked - logz)  # fp32 inputs: ~1e-7
    p = np.exp(c["logits"] - c["logits"].max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    check("token_entropy", -(p * np.log(p)).sum(-1))

    for name, diff in sorted(worst.items()):
        print(f"{name:24s} max |titan - reference| = {diff:.3e}")
    print(f"{len(worst)} passed, 0 failed")


if __name__ == "__main__":
    main()
