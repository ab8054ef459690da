"""Checks WarmupStableDecaySchedule against torchtitan's linear_warmup_stable_decay, restated here.

Usage: lr_scheduler_reference_test.py LR_SCHEDULE_FACTORS_BINARY

The reference below is written from torchtitan's definition (not copied): warmup capped at the
total, decay = Python round (ties to even) of total × decay_ratio capped at what warmup leaves,
stable = total + 1 - warmup - decay, and the factor of 0-based step s. Both sides evaluate the same
float64 operations with the same libm, so the tolerance, 1e-15 absolute, only allows for
formatting; in practice every factor is bitwise equal (counted below).
"""

import math
import subprocess
import sys

DECAY_RATIOS = [None, 0.0, 0.1, 0.125, 0.25, 0.3, 0.5, 0.7, 0.75, 0.9, 1.0]
DECAY_TYPES = ["linear", "sqrt", "cosine"]
MIN_LR_FACTORS = [0.0, 0.1]
MAX_STEPS = 40
TOLERANCE = 1e-15


def phases(total, warmup, decay_ratio):
    warmup = min(warmup, total)
    if decay_ratio is None:
        decay = total - warmup
    else:
        decay = min(round(total * decay_ratio), total - warmup)
    return warmup, total + 1 - warmup - decay, decay


def factor(step, warmup, stable, decay, decay_type, min_lr_factor):
    if step < warmup:
        return (step + 1) / warmup
    if step < warmup + stable:
        return 1.0
    progress = (step + 1 - warmup - stable) / decay
    shape = {
        "linear": lambda: 1 - progress,
        "sqrt": lambda: 1 - math.sqrt(progress),
        "cosine": lambda: 0.5 * (1.0 + math.cos(math.pi * progress)),
    }[decay_type]()
    return min_lr_factor + (1 - min_lr_factor) * shape


def main():
    grid = [(total, warmup, ratio, decay_type, min_lr)
            for total in range(1, MAX_STEPS + 1)
            for warmup in range(total + 3)
            for ratio in DECAY_RATIOS
            for decay_type in DECAY_TYPES
            for min_lr in MIN_LR_FACTORS]
    stdin = "".join(f"{t} {w} {-1.0 if r is None else r!r} {d} {m!r}\n" for t, w, r, d, m in grid)
    out = subprocess.run([sys.argv[1]], input=stdin, text=True, capture_output=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == len(grid), (len(lines), len(grid))

    # The grid must exercise what llround and Python's round disagree on: exact .5 products.
    ties = {(t, r) for t, _, r, _, _ in grid
            if r is not None and (t * r) % 1 == 0.5 and round(t * r) % 2 == 0}
    assert len(ties) >= 20, ties

    compared = bitwise = 0
    worst = 0.0
    for (total, warmup, ratio, decay_type, min_lr), line in zip(grid, lines):
        fields = line.split()
        want_phases = phases(total, warmup, ratio)
        got_phases = tuple(int(f) for f in fields[:3])
        assert got_phases == want_phases, (
            f"total={total} warmup={warmup} decay_ratio={ratio}: (warmup, stable, decay) "
            f"= {got_phases}, expected {want_phases}")
        got = [float(f) for f in fields[3:]]
        assert len(got) == total + 1, line
        for step, value in enumerate(got):
            want = factor(step, *want_phases, decay_type, min_lr)
            error = abs(value - want)
            worst = max(worst, error)
            assert error <= TOLERANCE, (
                f"total={total} warmup={warmup} decay_ratio={ratio} {decay_type} "
                f"min_lr_factor={min_lr} step={step}: {value!r}, expected {want!r}")
            compared += 1
            bitwise += value == want
    print(f"OK: {len(grid)} schedules ({len(ties)} round-half-even ties), {compared} factors, "
          f"{bitwise} bitwise equal, max |difference| {worst:g} (tolerance {TOLERANCE:g})")


if __name__ == "__main__":
    main()
