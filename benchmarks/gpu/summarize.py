"""Reads the benchmark's logs and prints the comparison as JSON and as a Markdown table: median
tokens/s over steps 6-20 (the first steps warm up and compile), MFU from tokens/s with one FLOP
formula for both frameworks (6·N + 12·L·H·Q·T per token, N the non-embedding parameters with the
output head; H200 SXM dense bf16 peak 989 TFLOP/s), peak memory as each framework reports it."""
import json
import os
import re
import sys

OUT = sys.argv[1]
PEAK = 989e12
LAYERS, DIM, HEADS, KV, HEAD_DIM, FFN, VOCAB, SEQ = 8, 4096, 32, 8, 128, 14336, 128256, 8192
PER_LAYER = DIM * (HEADS * HEAD_DIM) * 2 + DIM * (KV * HEAD_DIM) * 2 + 3 * DIM * FFN + 2 * DIM
N = LAYERS * PER_LAYER + VOCAB * DIM + DIM
FLOPS_PER_TOKEN = 6 * N + 12 * LAYERS * HEADS * HEAD_DIM * SEQ
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def median(values):
    values = sorted(values)
    return values[len(values) // 2] if values else None


def worst_difference(reference, run):
    """The largest per-step relative difference of `run`'s losses from `reference`'s (nan when
    either run has a non-finite loss, which titan's metrics write as null)."""
    pairs = list(zip(reference["losses"], run["losses"]))
    if not pairs or any(x is None or r is None for x, r in pairs):
        return float("nan")
    return max(abs(r - x) / x for x, r in pairs)


def print_ratio(label, first, second, reference, note=""):
    """first against second (one run's options): tokens/s, peak memory, loss curves vs reference's."""
    if not (first and second and first["tps"] and second["tps"]):
        return
    run = second if reference is first else first
    print(f"{label}: {first['tps'] / second['tps']:.3f}x tokens/s, peak memory "
          f"{first['memory_gib']:.1f} vs {second['memory_gib']:.1f} GiB; max per-step loss "
          f"difference {worst_difference(reference, run):.2e} over {len(run['losses'])} steps{note}")


def titan(name):
    path = os.path.join(OUT, name, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    rows = [json.loads(line) for line in open(path) if line.strip()]
    if not rows:  # the run stopped before its first step's metrics
        return None
    steady = [r for r in rows if 6 <= r["step"] <= 20]
    return {"tps": median([r["tps"] for r in steady]),
            "memory_gib": max(r["memory_gib"] for r in rows), "steps": len(rows),
            "final_loss": rows[-1]["loss"], "losses": [r["loss"] for r in rows]}


def torchtitan(name):
    path = os.path.join(OUT, f"{name}.log")
    if not os.path.exists(path):
        return None
    tps, memory, loss = [], [], None
    for line in open(path, errors="replace"):
        line = ANSI.sub("", line)
        m = re.search(r"step:\s*(\d+).*?loss:\s*([\d.]+).*?memory:\s*(-?[\d.]+)GiB"
                      r".*?tps:\s*([\d,]+)", line)
        if m:
            step = int(m.group(1))
            loss = float(m.group(2))
            memory.append(float(m.group(3)))
            if 6 <= step <= 20:
                tps.append(float(m.group(4).replace(",", "")))
    if not tps:
        return None
    return {"tps": median(tps), "memory_gib": max(memory), "final_loss": loss}


# h200_bench.sh's note of the kernels its training runs left off (their tests failed).
summary_path = os.path.join(OUT, "summary.txt")
kernels_off = [line.strip() for line in open(summary_path) if line.startswith("kernels left off")
               ] if os.path.exists(summary_path) else []
results = {"titan_bf16": titan("titan_8b8l"), "titan_float8": titan("titan_8b8l_float8"),
           "titan_cuda_graph": titan("titan_8b8l_cuda_graph"),
           "titan_fused_loss": titan("titan_8b8l_fused_loss"),
           "titan_unfused": titan("titan_8b8l_unfused"),
           "titan_float8_unfused": titan("titan_8b8l_float8_unfused"),
           "titan_selective_ac": titan("titan_8b8l_selective_ac"),
           "torchtitan_eager": torchtitan("torchtitan_eager"),
           "torchtitan_compiled": torchtitan("torchtitan_compiled"),
           "smoke": titan("smoke"), "smoke_cuda_graph": titan("smoke_cuda_graph"),
           "flops_per_token": FLOPS_PER_TOKEN, "kernels_left_off": kernels_off}
RUNS = ("titan_bf16", "titan_float8", "titan_cuda_graph", "titan_fused_loss", "titan_unfused",
        "titan_float8_unfused", "titan_selective_ac", "torchtitan_eager", "torchtitan_compiled")
for key in RUNS:
    if results[key] and results[key]["tps"]:
        results[key]["mfu_percent"] = results[key]["tps"] * FLOPS_PER_TOKEN / PEAK * 100
with open(os.path.join(OUT, "results.json"), "w") as f:
    json.dump(results, f, indent=2)
print(json.dumps(results, indent=2))
for line in kernels_off:
    print(f"\n{line} (the titan runs below are without them)")
print("\n| run | tokens/s | MFU | peak memory |\n| --- | --- | --- | --- |")
for key in RUNS:
    r = results[key]
    if r and r["tps"]:
        print(f"| {key} | {r['tps']:,.0f} | {r['mfu_percent']:.1f}% | {r['memory_gib']:.1f} GiB |")
    else:
        print(f"| {key} | (no result) | | |")
compiled = results["torchtitan_compiled"]
if results["titan_bf16"] and compiled and compiled["tps"]:
    print(f"\ntitan / torchtitan compiled: {results['titan_bf16']['tps'] / compiled['tps']:.3f}x")
    # The same bf16 run with one of titan's own options on (CUDA graphs, the fused loss).
    best = max((k for k in ("titan_bf16", "titan_cuda_graph", "titan_fused_loss")
                if results[k] and results[k]["tps"]), key=lambda k: results[k]["tps"])
    print(f"best titan bf16 option ({best}) / torchtitan compiled: "
          f"{results[best]['tps'] / compiled['tps']:.3f}x")
bf16, float8 = results["titan_bf16"], results["titan_float8"]
if bf16 and float8 and float8["tps"]:
    worst = worst_difference(bf16, float8)
    print(f"titan float8 / bf16: {float8['tps'] / bf16['tps']:.3f}x; "
          f"max per-step loss difference {worst:.2%} over {len(float8['losses'])} steps")
print_ratio("titan fused loss / whole logits", results["titan_fused_loss"], bf16, bf16,
            " (bf16 roundings)")
print_ratio("titan fused kernels / LibTorch compositions", bf16, results["titan_unfused"], bf16)
# Only where titan_8b8l_float8 failed (h200_bench.sh's fallback): float8 without the kernels.
print_ratio("titan float8 / bf16, both without titan's kernels", results["titan_float8_unfused"],
            results["titan_unfused"], results["titan_unfused"])
print_ratio("titan selective op AC / no AC", results["titan_selective_ac"], bf16, bf16,
            " (attention: flash replayed vs SDPA's choice)")
for eager, graphed in (("smoke", "smoke_cuda_graph"), ("titan_bf16", "titan_cuda_graph")):
    e, g = results[eager], results[graphed]
    if e and g and g["tps"]:
        worst = worst_difference(e, g)
        print(f"{graphed} / {eager}: {g['tps'] / e['tps']:.3f}x tokens/s; max per-step loss "
              f"difference {worst:.2e} over {len(g['losses'])} steps (the same kernels: 0 expected)")
