#!/usr/bin/env bash
# Benchmark (not a test): what the collective flight recorder costs a training step. The debug
# model, FSDP over `nproc` local ranks (Gloo on loopback), [comm] trace_buf_size=0 (nothing
# recorded) against the default 20000 (every Gloo operation recorded), alternating run by run,
# back to back on the same machine; then the recorder's own cost per operation, which step times on
# a busy machine cannot resolve.
# Usage: benchmarks/comm_trace_benchmark.sh [steps] [rounds] [nproc]  (after tools/setup.sh)
set -euo pipefail
steps="${1:-30}"
rounds="${2:-3}"
nproc="${3:-2}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/titan"
python="${TITAN_VENV:-$cache/venv}/bin/python3"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bazel build -c opt //tools/titan_train //benchmarks:comm_trace_record_benchmark >/dev/null
for round in $(seq "$rounds"); do
  for size in 0 20000; do
    bazel-bin/tools/titan_train/titan_train --nproc_per_node="$nproc" \
      --job.config_file=configs/llama3_debugmodel.toml --job.dump_folder="$out/$size-$round" \
      --training.steps="$steps" --training.local_batch_size=$((8 / nproc)) \
      --validation.enable=false --checkpoint.enable=false --metrics.enable_tensorboard=false \
      --metrics.log_freq=1 --comm.trace_buf_size="$size" 2>"$out/$size-$round.log"
  done
done
"$python" - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def step_ms(size, round):
    rows = [json.loads(line) for line in open(f"{out}/{size}-{round}/metrics.jsonl")]
    # Milliseconds per step from tokens/s (the same global batch every step); 3 warm-up steps.
    return [1000 * 8 * 128 / r["tps"] for r in rows if r["step"] > 3]
medians = {size: [statistics.median(step_ms(size, r)) for r in range(1, rounds + 1)]
           for size in (0, 20000)}
for size, runs in medians.items():
    print(f"trace_buf_size={size:5d}: median step {statistics.median(runs):7.1f} ms "
          f"(per run: {', '.join(f'{m:.1f}' for m in runs)})")
# Each round's two runs ran next to each other: their difference is the least disturbed by load
# that comes and goes.
paired = [on - off for off, on in zip(medians[0], medians[20000])]
off = statistics.median(medians[0])
print(f"recording costs {statistics.median(paired):+.1f} ms per step, median of the {rounds} "
      f"rounds' differences ({100 * statistics.median(paired) / off:+.1f}%; per round: "
      f"{', '.join(f'{d:+.1f}' for d in paired)})")
PY
bazel-bin/benchmarks/comm_trace_record_benchmark "$out/dump" 2>/dev/null
