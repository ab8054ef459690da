#!/usr/bin/env bash
# Benchmark (not a test): how much a checkpoint save slows training, [checkpoint] async_mode=async
# vs disabled, on the debug model (full saves: weights + AdamW state, ~74 MB), same machine, back
# to back. A save happens after every `interval`-th step; the step after it pays for it (disabled:
# the whole write; async: staging a CPU copy, then the write competes for the cores).
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
normal = {}
for mode in ("disabled", "async"):
    t = step_seconds(mode)
    after_save = [v for s, v in t.items() if (s - 1) % interval == 0]
    others = [v for s, v in t.items() if (s - 1) % interval != 0]
    ratio = statistics.median(after_save) / statistics.median(others)
    worst = max(after_save) / statistics.median(others)
    print(f"async_mode={mode:8s}: step after a save {ratio:.2f}x a normal step (median; worst "
          f"{worst:.2f}x) over {len(after_save)} saves")
PY
