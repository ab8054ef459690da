#!/usr/bin/env bash
# Benchmark (not a test): tokens/s of the debug model's training step on this CPU, titan_train vs
# an eager PyTorch loop of the same model on the same torch, back to back on the same machine, on
# the same batches (the bundled corpus), with the same statistic: the median step after 3 warm-up
# steps, each step timed from its batch to the optimizer step.
# Usage: benchmarks/cpu_step_benchmark.sh [steps]   (from the repo root, after tools/setup.sh)
set -euo pipefail
steps="${1:-30}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/titan"
python="${TITAN_VENV:-$cache/venv}/bin/python3"
out=$(mktemp -d)
bazel build -c opt //tools/titan_train >/dev/null
# Same shapes as the reference: 8 × 128 tokens, vocab 2048; no validation or checkpoint I/O.
bazel-bin/tools/titan_train/titan_train --job.config_file=configs/llama3_debugmodel.toml \
  --job.dump_folder="$out" --training.steps=$((steps + 3)) --validation.enable=false \
  --checkpoint.enable=false --metrics.enable_tensorboard=false --metrics.log_freq=1 2>/dev/null
titan=$("$python" - "$out/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][3:]  # skip warm-up steps, as the reference
print(statistics.median(r["tps"] for r in rows))  # as the reference: the median of steps' tok/s
PY
)
eager=$("$python" benchmarks/eager_llama3_debugmodel.py --steps "$steps" | "$python" -c \
  'import json,sys; print(json.load(sys.stdin)["median_tokens_per_second"])')
"$python" -c "t, e = $titan, $eager; print(f'titan_train {t:,.0f} tok/s | eager PyTorch {e:,.0f} tok/s | ratio {t / e:.2f}x')"
rm -rf "$out"
