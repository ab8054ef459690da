#!/usr/bin/env bash
# Benchmark (not a test): what [profiling] enable_profiling costs the steps it does not trace. The
# debug model in one process, titan_train with profiling off against profiling on with a cycle
# longer than the run (profile_freq=1000: every step is an idle step of the cycle, running the
# same code as the idle steps of any cycle), alternating run by run, back to back on the same
# machine. Per run: the median step time (steps 4 on) and the process's CPU time (user + system,
# steadier than wall time when other jobs share the cores). "Noise" compares the off-runs of
# consecutive rounds with each other.
# Usage: benchmarks/profiling_overhead_benchmark.sh [steps] [rounds]  (after tools/setup.sh)
# On a shared machine OMP_NUM_THREADS=1 (one intra-op thread per run) damps the swings that
# other jobs' load causes.
set -euo pipefail
steps="${1:-20}"
rounds="${2:-3}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/titan"
python="${TITAN_VENV:-$cache/venv}/bin/python3"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bazel build -c opt //tools/titan_train 2>/dev/null
train() {  # name, extra flags...
  local name="$1"
  shift
  /usr/bin/time -f "%U %S" -o "$out/$name.cpu" bazel-bin/tools/titan_train/titan_train \
    --job.config_file=configs/llama3_debugmodel.toml --job.dump_folder="$out/$name" \
    --training.steps="$steps" --validation.enable=false --checkpoint.enable=false \
    --metrics.enable_tensorboard=false --metrics.log_freq=1 "$@" 2>"$out/$name.log"
}
for round in $(seq "$rounds"); do
  train "off-$round"
  train "on-$round" --profiling.enable_profiling=true --profiling.profile_freq=1000 \
    --profiling.profiler_warmup=3 --profiling.profiler_active=1
  # Profiling was on but never started: no trace may exist.
  if [[ -n "$(ls -A "$out/on-$round/profile_traces")" ]]; then
    echo "on-$round wrote a trace" >&2
    exit 1
  fi
done
"$python" - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def step_ms(name):
    rows = [json.loads(line) for line in open(f"{out}/{name}/metrics.jsonl")]
    # Milliseconds per step from tokens/s (the same 8 x 128 tokens every step); 3 warm-up steps.
    return statistics.median(1000 * 8 * 128 / r["tps"] for r in rows if r["step"] > 3)
def cpu_s(name):
    user, system = map(float, open(f"{out}/{name}.cpu").read().split()[-2:])
    return user + system
runs = {(kind, r): (step_ms(f"{kind}-{r}"), cpu_s(f"{kind}-{r}"))
        for kind in ("off", "on") for r in range(1, rounds + 1)}
for r in range(1, rounds + 1):
    (off_ms, off_cpu), (on_ms, on_cpu) = runs[("off", r)], runs[("on", r)]
    print(f"round {r}: median step off {off_ms:.1f} ms, on {on_ms:.1f} ms (on/off "
          f"{on_ms / off_ms:.3f}); CPU off {off_cpu:.1f} s, on {on_cpu:.1f} s (on/off "
          f"{on_cpu / off_cpu:.3f})")
for i, what in ((0, "step time"), (1, "CPU time")):
    ratios = [runs[("on", r)][i] / runs[("off", r)][i] for r in range(1, rounds + 1)]
    noise = [runs[("off", r + 1)][i] / runs[("off", r)][i] for r in range(1, rounds)]
    print(f"{what}: on/off median {statistics.median(ratios):.3f} (rounds "
          f"{', '.join(f'{x:.3f}' for x in ratios)}); noise off/off between rounds "
          f"{', '.join(f'{x:.3f}' for x in noise)}")
PY
