#!/usr/bin/env bash
# The H200 benchmark, run on the GPU machine from the folder benchmarks/gpu/pack.sh made (carried
# as gpu_pack): every stage under its own timeout, results written to $OUT as they come, so a
# stage that fails or runs out of time leaves the others' results. Stages, in order:
#   probe (GPU, torch) · assets · kernels (fused RoPE/SwiGLU/float8 cast/Adam CUDA kernels against
#   ATen; the training runs go through them; kernels_NAME: a failing kernel's tests alone, and if
#   they fail, the training runs leave it off) · optimizer (titan's Adam kernel vs ATen's
#   _fused_adamw_ on the 8B-8-layer parameters: time, and equal bits) · optimizer_copies (the
#   same kernel writing the linears' bf16 weight copies, against without) · float8 (_scaled_mm against its emulation, each
#   recipe) · attention (the masked kernel pair ring attention calls, and decode attention, against
#   SDPA) · cuda_graph (replays equal eager steps) · titan_8b8l, titan_8b8l_float8, wheels,
#   torchtitan_compiled, torchtitan_eager (Llama 3 8B shapes with 8 layers, batch 1 x seq 8192,
#   bf16, no AC, 20 steps each) · nccl (ProcessGroupNCCL test, 1 GPU) · smoke (titan debug model on CUDA, bf16, loss
#   falls) · smoke_cuda_graph (the same, replayed as CUDA graphs) · chunked_ce · fused_kernels
#   (fused vs ATen timings) · ops · titan_8b8l_fused_loss · titan_8b8l_unfused ·
#   titan_8b8l_selective_ac · titan_8b8l_cuda_graph · summary. (titan_8b8l_unfused and
#   titan_8b8l_float8_unfused run at once where titan_8b8l or titan_8b8l_float8 fails.)
# Usage on the device: OUT=... BENCH_BUDGET=570 bash gpu_pack/h200_bench.sh [STAGE ...]: the
# named stages only (default all), in the order above, within the budget (see stage()). The
# kernels left off come from this call's kernels stage, or BENCH_DISABLED_KERNELS (see below).
# The limits add up past one 600 s device call, so split the stages over calls; titan_8b8l* and
# torchtitan_* need assets in the same call, torchtitan_* wheels too, and summary reads that
# call's $OUT (run summarize.py here on the calls' results put together).
set -uo pipefail
cd "$(dirname "$0")"
OUT="${OUT:-/tmp/h200_bench}"
mkdir -p "$OUT"
work=/tmp/h200_work
rm -rf "$work" && mkdir -p "$work"
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
nvidia_libs=$(python3 -c 'import glob, os, nvidia; print(":".join(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib"))))')
# titan's binaries find the box's LibTorch and CUDA, and the packed Debian libraries (only they:
# Python's own modules keep the box's zlib, lzma, ...).
export TITAN_LD_LIBRARY_PATH="$PWD/lib:$torch_lib:$nvidia_libs:${LD_LIBRARY_PATH:-}"
native() { LD_LIBRARY_PATH="$TITAN_LD_LIBRARY_PATH" "$@"; }
export -f native

only=" $* "
# BENCH_BUDGET=S: the seconds this call may take (the device call's limit); each stage's limit is
# cut to what is left, keeping 40 s for the summary, and a stage that no longer fits is skipped
# (listed in summary.txt, for the next call).
budget="${BENCH_BUDGET:-0}"
# BENCH_TINY=1 (a dry run of this script on CPU, here): the 8B-shaped runs become 2 layers of dim
# 256 at seq_len 512 (make_assets.py, torchtitan_run.py), and BENCH_SITE names a folder where the
# wheels are already installed for this Python. The figures mean nothing; the plumbing is checked.
export BENCH_TINY="${BENCH_TINY:-0}"
seq_len=8192
[[ $BENCH_TINY == 1 ]] && seq_len=512
stage() {  # stage NAME SECONDS COMMAND...: its output in $OUT/NAME.log, its outcome in summary.txt
  local name=$1 seconds=$2 start=$SECONDS
  shift 2
  local key=$name
  [[ $name == kernels_* ]] && key=kernels  # a kernel's tests alone go with the kernels stage
  if [[ "$only" != "  " && "$only" != *" $key "* ]]; then return 0; fi
  if ((budget > 0)); then
    local reserve=40
    [[ $name == summary ]] && reserve=10
    local left=$((budget - SECONDS - reserve))
    if ((left < 15)); then
      echo "$name: skipped, ${left}s of the budget left" | tee -a "$OUT/summary.txt"
      return 0
    fi
    ((seconds > left)) && seconds=$left
  fi
  echo "== $name (limit ${seconds}s)"
  # Through bash: timeout runs programs only, and titan below is a (exported) function.
  timeout --kill-after=10 "$seconds" bash -c '"$@"' _ "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - start))s" | tee -a "$OUT/summary.txt"
  tail -n 3 "$OUT/$name.log"
  return $rc
}

titan() {  # titan NAME FLAGS...: titan_train with its dump in $OUT/NAME (NAME a path: there)
  local dump=$1
  [[ $dump == */* ]] || dump="$OUT/$dump"
  # One seed for all: the runs' loss curves are compared (float8, fused loss, CUDA graphs).
  native bin/titan_train --job.dump_folder="$dump" --training.seed=0 --checkpoint.enable=false \
    --validation.enable=false --metrics.log_freq=1 --metrics.enable_tensorboard=false \
    --job.description="h200 bench $1" "${@:2}"
}
export OUT
export -f titan

# The kernels' tests and the acceptance's runs first (titan bf16 and float8, torchtitan compiled),
# so that a stage that hangs later costs only what comes after it; then the NCCL test, the smoke
# runs, the op benchmarks, and titan's options on the same run.
stage probe 30 sh -c 'nvidia-smi; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"'
stage assets 30 python3 make_assets.py "$work"
# The CUDA kernels' tests against their ATen references: seconds each, and decisive if the
# training runs below fail.
stage kernels 60 native bin/cuda_kernels_test
# A kernel whose tests fail alone (a CUDA fault fails every test after it, so the suspects run
# again one by one) stays off in the training runs below: the other kernels keep their figures.
# BENCH_DISABLED_KERNELS=adam,rope: left off whatever this call's tests say (a later call that
# does not run the kernels stage, after one that found them failing).
IFS=, read -ra kernels_off <<<"${BENCH_DISABLED_KERNELS:-}"
if [[ -f $OUT/kernels.log ]]; then
  for kernel in $(python3 kernel_switches.py suspects "$OUT/kernels.log"); do
    # Off unless its tests pass alone (a rerun skipped for want of time leaves no log).
    if ! stage "kernels_$kernel" 30 native bin/cuda_kernels_test \
        --gtest_filter="$(python3 kernel_switches.py filter "$kernel")" ||
        [[ ! -f $OUT/kernels_$kernel.log ]]; then
      kernels_off+=("$kernel")
    fi
  done
fi
kernels_off_flags=()
if ((${#kernels_off[@]})); then
  kernels_off_flags=(--compile.disabled_kernels="$(IFS=,; echo "${kernels_off[*]}")")
  echo "kernels left off in the training runs: ${kernels_off[*]}" | tee -a "$OUT/summary.txt"
fi
stage optimizer 40 native bin/optimizer_step_benchmark 8b8l 10 cuda
stage optimizer_copies 40 native bin/optimizer_step_benchmark 8b8l 10 cuda_copies
stage float8 20 native bin/float8_cuda_test
stage attention 20 native bin/attention_cuda_test
stage cuda_graph 20 native bin/cuda_graph_test
common=(--training.seq_len=$seq_len --training.local_batch_size=1 --training.steps=20
        --training.mixed_precision_param=bfloat16 --activation_checkpoint.mode=none
        --lr_scheduler.warmup_steps=10 --optimizer.lr=3e-4)
llama8b8l=(--model.name=llama3 --model.flavor=from_checkpoint --model.hf_assets_path="$work/model"
           --training.dataset_path="$work/corpus/train.jsonl" --optimizer.implementation=fused
           "${common[@]}" "${kernels_off_flags[@]}")
# A run that fails in titan's CUDA kernels is run again at once without them (the call still
# brings a figure for each); titan_8b8l_unfused then does not run a second time below.
unfused=(--compile.fused_kernels=false)
stage titan_8b8l 150 titan titan_8b8l "${llama8b8l[@]}" ||
  { stage titan_8b8l_unfused 120 titan titan_8b8l_unfused "${llama8b8l[@]}" "${unfused[@]}"
    unfused_ran=1; }
# Float8 (tensorwise, torchtitan's preset: the output head in bf16) on the same run: its loss curve
# against titan_8b8l's is read by summarize.py.
float8=(--model.converters=float8 --float8.filter_fqns=output)
stage titan_8b8l_float8 120 titan titan_8b8l_float8 "${llama8b8l[@]}" "${float8[@]}" ||
  stage titan_8b8l_float8_unfused 120 titan titan_8b8l_float8_unfused "${llama8b8l[@]}" \
    "${float8[@]}" "${unfused[@]}"
site="${BENCH_SITE:-$work/site}"
[[ -z ${BENCH_SITE:-} ]] && stage wheels 60 python3 -m pip install -q --no-index --no-deps \
  --no-compile --target "$site" wheels/*.whl
# No network there: datasets and the hub read local folders only, without trying to reach it.
export PYTHONPATH="$site" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
# python3 -m: torchrun need not be on PATH where python3 is.
torchtitan=(python3 -m torch.distributed.run --standalone --nproc_per_node=1 torchtitan_run.py
            --model.name=llama3 --model.flavor=8B_8L --model.hf_assets_path="$work/model"
            --training.dataset=c4_test --training.dataset_path="$work/corpus" --metrics.log_freq=1
            --optimizer.implementation=fused "${common[@]}")
# torchtitan 0.2.2 compiles model and loss by default (`--compile.components model loss` is refused).
stage torchtitan_compiled 240 "${torchtitan[@]}" --job.dump_folder="$work/tt" --compile.enable
stage torchtitan_eager 150 "${torchtitan[@]}" --job.dump_folder="$work/tt"
stage nccl 30 native bin/nccl_communicator_test
smoke=(--model.tokenizer_path=default_tokenizer --training.dataset_path=default_corpus/train.jsonl
       --training.seq_len=512 --training.local_batch_size=8 --training.steps=30
       --training.mixed_precision_param=bfloat16 --lr_scheduler.warmup_steps=5 --optimizer.lr=2e-3
       --activation_checkpoint.mode=none "${kernels_off_flags[@]}")
stage smoke 90 titan smoke "${smoke[@]}"
# The same run replayed as CUDA graphs from step 2: summarize.py compares its losses with smoke's.
stage smoke_cuda_graph 90 titan smoke_cuda_graph "${smoke[@]}" --compile.cuda_graph=true
stage chunked_ce 60 native bin/chunked_ce_benchmark 8192 4096 1024 cuda
stage fused_kernels 60 native bin/fused_kernels_benchmark
stage ops 90 python3 op_bench.py "$OUT/ops.json"
# The head fused with the loss, 2048 tokens' logits at a time: speed and peak memory vs titan_8b8l.
stage titan_8b8l_fused_loss 120 titan titan_8b8l_fused_loss "${llama8b8l[@]}" \
  --training.loss_chunk_size=2048
# Without titan's CUDA fast paths ([compile] fused_kernels = false): what they buy, same run.
[[ -z ${unfused_ran:-} ]] &&
  stage titan_8b8l_unfused 120 titan titan_8b8l_unfused "${llama8b8l[@]}" "${unfused[@]}"
# Op-level selective checkpointing (the 8B config's AC): what recomputation costs, what it saves,
# and its attention replay (flash on grouped heads) on the same run.
stage titan_8b8l_selective_ac 120 titan titan_8b8l_selective_ac "${llama8b8l[@]}" \
  --activation_checkpoint.mode=selective --activation_checkpoint.selective_ac_option=op
stage titan_8b8l_cuda_graph 120 titan titan_8b8l_cuda_graph "${llama8b8l[@]}" --compile.cuda_graph=true
# One traced step (the 10th) of titan bf16, titan float8 and torchtitan compiled, on the same
# run, read alike by kernel_table.py: where each spends its GPU time. Traces stay in $work.
profile=(--profiling.profile_freq=10 --training.steps=10)
stage profile_titan 60 titan "$work/profile_titan" "${llama8b8l[@]}" "${profile[@]}" \
  --profiling.enable_profiling=true
stage profile_titan_float8 60 titan "$work/profile_titan_float8" "${llama8b8l[@]}" \
  "${float8[@]}" "${profile[@]}" \
  --profiling.enable_profiling=true
# tyro's booleans take no value.
stage profile_torchtitan_compiled 120 "${torchtitan[@]}" --compile.enable \
  --job.dump_folder="$work/profile_tt" "${profile[@]}" --profiling.enable_profiling
trace=profile_traces/iteration_10/rank0_trace.json
stage kernel_table 30 python3 kernel_table.py "titan_bf16=$work/profile_titan/$trace" \
  "titan_float8=$work/profile_titan_float8/$trace" "torchtitan_compiled=$work/profile_tt/$trace"
stage summary 30 python3 summarize.py "$OUT"
cat "$OUT/summary.log" "$OUT/kernel_table.log" 2>/dev/null
# At most 8 files come back from the device: all of $OUT in one archive.
tar -czf "$work/h200_bench.tgz" -C "$OUT" . && rm -rf "${OUT:?}"/* && mv "$work/h200_bench.tgz" "$OUT/"
