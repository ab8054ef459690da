#!/usr/bin/env bash
# Benchmark (not a test): how much a checkpoint save slows training, [checkpoint] async_mode=async
# vs disabled, on the debug model (full saves: weights + AdamW state, ~74 MB), same machine, back
# to back. A save happens after every `interval`-th step; the steps after it pay for it (disabled:
# the first one waits for the whole write; async: staging a CPU copy, then the paced background
# write competes for the cores over a few steps).
# Usage: benchmarks/async_checkpoint_benchmark.sh [steps] [interval] [nproc]  (after tools/setup.sh)
set -euo pipefail
steps="${1:-42}"
interval="${2:-10}"
nproc="${3:-1}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/titan"
python="${TITAN_VENV:-$cache/venv}/bin/python3"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bazel build -c opt //tools/titan_train >/dev/null
for mode in disabled async; do
  bazel-bin/tools/titan_train/titan_train --nproc_per_node="$nproc" \
    --job.config_file=configs/llama3_debugmodel.toml --job.dump_folder="$out/$mode" \
    --training.steps="$steps" --validation.enable=false --metrics.enable_tensorboard=false \
    --metrics.log_freq=1 --checkpoint.enable=true --checkpoint.interval="$interval" \
    --checkpoint.keep_latest_k=2 --checkpoint.last_save_model_only=false \
    --checkpoint.async_mode="$mode" 2>"$out/$mode.log"
done
"$python" - "$out" "$interval" <<'PY'
import json, statistics, sys
out, interval = sys.argv[1], int(sys.argv[2])
def step_seconds(mode):
    rows = [json.loads(line) for line in open(f"{out}/{mode}/metrics.jsonl")]
    # Seconds per step from tokens/s (the same tokens every step); steps 1-2 are warm-up.
    return {r["step"]: 1.0 / r["tps"] for r in rows if r["step"] > 2}
for mode in ("disabled", "async"):
    t = step_seconds(mode)
    # The slowest of the 3 steps after each save (a background save spans a few steps), against
    # the median of the steps further from a save.
    save_of = lambda s: s - 1 - (s - 1) % interval
    window = {s for s in t if (s - 1) % interval <= 2 and save_of(s) >= interval}
    saves = sorted({save_of(s) for s in window})
    slowest = [max(t[s] for s in window if save_of(s) == save) for save in saves]
    normal = statistics.median(v for s, v in t.items() if s not in window)
    ratios = [v / normal for v in slowest]
    # The same statistic for 3 steps far from any save: the noise floor of "slowest of 3".
    quiet = [max(t[s] for s in (save + 5, save + 6, save + 7)) / normal for save in saves
             if save + 7 in t]
    print(f"async_mode={mode:8s}: slowest step during a save {statistics.median(ratios):.2f}x a "
          f"normal step (median over {len(ratios)} saves; worst {max(ratios):.2f}x); "
          f"away from saves {statistics.median(quiet):.2f}x (worst {max(quiet):.2f}x)")
PY
