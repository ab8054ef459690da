#!/usr/bin/env bash
# Benchmark (not a test): each pipeline schedule's measured idle fraction (the bubble) on 4 pipeline
# ranks with 8 microbatches, against what its action order implies. Qwen3's debug model (8 layers;
# first/last_stage_less_layers=0, so every stage holds the same number of layers), 8 sequences of
# `seq_len` tokens per step as 8 microbatches of one, 4 local ranks (Gloo on loopback). Each rank
# logs, per step, the seconds it spent in the schedule and of them waiting for another stage's
# tensor; the idle fraction is waited / total summed over ranks and steps after the first.
# "theory" is pp_schedule's simulation with a forward 1, backward 2 (I 1, W 1).
# Usage: benchmarks/pipeline_bubble_benchmark.sh [steps] [seq_len]  (after tools/setup.sh)
set -euo pipefail
steps="${1:-6}"
seq_len="${2:-256}"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/titan"
python="${TITAN_VENV:-$cache/venv}/bin/python3"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bazel build -c opt //tools/titan_train //tools/pp_schedule >/dev/null
schedules=(GPipe 1F1B Interleaved1F1B InterleavedZeroBubble ZBVZeroBubble DualPipeV)
for schedule in "${schedules[@]}"; do
  bazel-bin/tools/titan_train/titan_train --nproc_per_node=4 \
    --job.config_file=configs/llama3_debugmodel.toml --model.name=qwen3 \
    --job.dump_folder="$out/$schedule" --training.steps="$steps" --training.seq_len="$seq_len" \
    --training.local_batch_size=8 --training.global_batch_size=8 \
    --parallelism.pipeline_parallel_degree=4 --parallelism.data_parallel_shard_degree=1 \
    --parallelism.pipeline_parallel_schedule="$schedule" \
    --parallelism.pipeline_parallel_microbatch_size=1 \
    --parallelism.pipeline_parallel_first_stage_less_layers=0 \
    --parallelism.pipeline_parallel_last_stage_less_layers=0 \
    --validation.enable=false --checkpoint.enable=false --metrics.enable_tensorboard=false \
    --metrics.log_freq=1 2>"$out/$schedule.log"
  bazel-bin/tools/pp_schedule/pp_schedule --schedule="$schedule" --pp=4 --microbatches=8 \
    | tail -n 1 >"$out/$schedule.theory"
done
"$python" - "$out" "${schedules[@]}" <<'PY'
import re, statistics, sys
out, schedules = sys.argv[1], sys.argv[2:]
line = re.compile(r"pipeline rank (\d+) .*: waited ([\d.]+) s of ([\d.]+) s .* at step (\d+)")
print(f"{'schedule':22s} {'idle (measured)':>15s} {'per rank':>28s} {'theory':>7s} "
      f"{'median step':>12s}")
for schedule in schedules:
    waited, total = {}, {}
    steps = {}
    for rank, wait, spent, step in line.findall(open(f"{out}/{schedule}.log").read()):
        if int(step) == 1:
            continue  # warm-up
        rank = int(rank)
        waited[rank] = waited.get(rank, 0) + float(wait)
        total[rank] = total.get(rank, 0) + float(spent)
        steps.setdefault(int(step), []).append(float(spent))
    idle = sum(waited.values()) / sum(total.values())
    per_rank = " ".join(f"{waited[r] / total[r]:.3f}" for r in sorted(total))
    theory = re.search(r"([\d.]+) with F 1", open(f"{out}/{schedule}.theory").read()).group(1)
    step = statistics.median(max(v) for v in steps.values())
    print(f"{schedule:22s} {idle:15.3f} {per_rank:>28s} {float(theory):7.3f} {step:10.2f} s")
PY
