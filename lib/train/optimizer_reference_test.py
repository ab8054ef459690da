"""Checks titan's Optimizer against torch.optim.AdamW and Adam, step for step.

Usage: optimizer_reference_test.py OPTIMIZER_STEPS_BINARY

For each optimizer (AdamW, Adam), implementation (for-loop, foreach, fused) and set of parameter
groups (none; two groups as a job file would write them), the binary and torch take the same 6
steps from the same parameters with the same gradients (one parameter has none at one step) and the
same schedule factors; the parameters and the exp_avg, exp_avg_sq and step state must agree.

Tolerance: 1e-6 relative (max |difference| / max |torch's value|, per tensor), float32 rounding
over a few steps. Every implementation is also asserted bitwise equal to torch's: titan issues the
same ATen calls with the same scalars in the same order (for-loop: _single_tensor_adam's
per-tensor ops; foreach: _multi_tensor_adam's _foreach_* ops; fused: the same _fused_adam(w)_
kernel), so any difference at all means a step was not mirrored.
"""

import os
import re
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

SHAPES = {
    "tok_embeddings.weight": (37, 16),
    "layers.0.attention.wq.weight": (16, 16),
    "layers.0.attention_norm.weight": (16,),
    "layers.0.feed_forward.w1.weight": (43, 16),
    "norm.weight": (16,),
    "output.bias": (37,),
}
LR_FACTORS = [0.2, 0.6, 1.0, 1.0, 0.7, 0.3]
NO_GRAD = {(2, "norm.weight")}  # (step, parameter) without a gradient: torch skips it
DEFAULTS = {"lr": 1e-2, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
# What a job file would say, and the same groups as torch sees them.
GROUPS_TOML = ('[{pattern = "norm|bias$", weight_decay = 0.0}, '
               '{pattern = "tok_embeddings", lr = 3e-3, betas = [0.8, 0.9], eps = 1e-6}]')
GROUPS = [("norm|bias$", {"weight_decay": 0.0}),
          ("tok_embeddings", {"lr": 3e-3, "betas": (0.8, 0.9), "eps": 1e-6})]
IMPLEMENTATIONS = {"for-loop": {"foreach": False, "fused": False},
                   "foreach": {"foreach": True, "fused": False},
                   "fused": {"foreach": False, "fused": True}}
BITWISE = {"for-loop", "foreach", "fused"}
TOLERANCE = 1e-6


def make_data():
    gen = torch.Generator().manual_seed(0)
    params = {n: torch.randn(s, generator=gen) for n, s in SHAPES.items()}
    grads = [{n: torch.randn(s, generator=gen) * (step + 1) for n, s in SHAPES.items()
              if (step, n) not in NO_GRAD} for step in range(len(LR_FACTORS))]
    return params, grads


def torch_groups(params, groups):
    """torchtitan's rule: each parameter joins the first group whose pattern re.search finds."""
    claimed, result = set(), []
    for pattern, overrides in groups:
        members = []
        for n, p in params.items():
            if n not in claimed and re.search(pattern, n):
                members.append(p)
                claimed.add(n)
        result.append({"params": members, **DEFAULTS, **overrides})
    rest = [p for n, p in params.items() if n not in claimed]
    if rest:
        result.append({"params": rest, **DEFAULTS})
    return result


def run_torch(name, implementation, groups, params, grads):
    live = {n: torch.nn.Parameter(t.clone()) for n, t in params.items()}
    cls = torch.optim.AdamW if name == "AdamW" else torch.optim.Adam
    opt = cls(torch_groups(live, groups), **IMPLEMENTATIONS[implementation])
    base_lrs = [g["lr"] for g in opt.param_groups]
    for step, factor in enumerate(LR_FACTORS):
        for n, p in live.items():
            p.grad = grads[step][n].clone() if n in grads[step] else None
        for group, base_lr in zip(opt.param_groups, base_lrs):
            group["lr"] = base_lr * factor  # as LambdaLR sets it
        opt.step()
    out = {}
    for n, p in live.items():
        out[n] = p.detach()
        if p in opt.state:
            state = opt.state[p]
            out[f"{n}.exp_avg"] = state["exp_avg"]
            out[f"{n}.exp_avg_sq"] = state["exp_avg_sq"]
            out[f"{n}.step"] = torch.tensor(int(state["step"].item()))
    return out


def main():
    binary = sys.argv[1]
    tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    params, grads = make_data()
    inputs = {f"param/{n}": t for n, t in params.items()}
    for step, step_grads in enumerate(grads):
        inputs.update({f"grad/{step}/{n}": g for n, g in step_grads.items()})
    inputs["lr_factors"] = torch.tensor(LR_FACTORS, dtype=torch.float64)
    in_path = os.path.join(tmp, "in.safetensors")
    save_file(inputs, in_path, metadata={"names": ",".join(SHAPES)})

    worst = {}
    for name in ("AdamW", "Adam"):
        for implementation in IMPLEMENTATIONS:
            for groups, groups_flag in (([], "[]"), (GROUPS, GROUPS_TOML)):
                case = f"{name} {implementation} {'groups' if groups else 'no groups'}"
                out_path = os.path.join(tmp, "out.safetensors")
                subprocess.run(
                    [binary, in_path, out_path, f"--optimizer.name={name}",
                     f"--optimizer.implementation={implementation}",
                     f"--optimizer.lr={DEFAULTS['lr']!r}",
                     f"--optimizer.beta1={DEFAULTS['betas'][0]!r}",
                     f"--optimizer.beta2={DEFAULTS['betas'][1]!r}",
                     f"--optimizer.eps={DEFAULTS['eps']!r}",
                     f"--optimizer.weight_decay={DEFAULTS['weight_decay']!r}",
                     f"--optimizer.param_groups={groups_flag}"],
                    check=True, capture_output=True, text=True)
                got = load_file(out_path)
                want = run_torch(name, implementation, groups, params, grads)
                assert sorted(got) == sorted(want), (case, sorted(set(got) ^ set(want)))
                for key, expected in want.items():
                    if key.endswith(".step"):
                        assert got[key].item() == expected.item(), (case, key)
                        continue
                    scale = expected.abs().max().item()
                    rel = (got[key] - expected).abs().max().item() / scale
                    worst[implementation] = max(worst.get(implementation, 0.0), rel)
                    assert rel <= TOLERANCE, f"{case}: {key}: relative difference {rel:g}"
                    if implementation in BITWISE:
                        assert torch.equal(got[key], expected), f"{case}: {key}: not bitwise"
                print(f"OK {case}")
    summary = ", ".join(f"{impl} {rel:g}" for impl, rel in worst.items())
    print(f"OK: max relative difference per implementation: {summary} (tolerance {TOLERANCE:g}); "
          f"bitwise: {', '.join(sorted(BITWISE))}")


if __name__ == "__main__":
    main()
