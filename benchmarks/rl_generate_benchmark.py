"""Generation speed on CPU: titan_rl --generate against transformers' generate on the same model
(a random Llama 3 debugmodel-shaped checkpoint written by transformers), the same left-padded batch
of prompts and the same number of greedy tokens; titan once with its default kernels and once in
batch-invariant mode ([debug] batch_invariant). A benchmark, not a test: prints tokens per wall
second (each side's best round) and per CPU second of its threads (median), and their ratios.

usage: rl_generate_benchmark.py TITAN_RL [--batch 32] [--new_tokens 64] [--rounds 5] [--threads N]
(run from the repository root, e.g. after bazel build //tools/titan_rl:
 ~/.cache/titan/venv/bin/python benchmarks/rl_generate_benchmark.py bazel-bin/tools/titan_rl/titan_rl)
"""
import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "rl"))
import common  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("titan_rl")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    # 1: per-CPU-second rates that contention does not skew (no thread waits for a preempted one).
    parser.add_argument("--threads", type=int, default=0, help="0: LibTorch's default")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        env["OMP_NUM_THREADS"] = str(args.threads)
    tmp = tempfile.mkdtemp(prefix="rl_generate_bench_")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    hf = os.path.join(tmp, "hf")
    # Shaped like titan's llama3 debugmodel (dim 256, 6 layers, 16 heads, FFN 768).
    model = common.save_random_hf(hf, "llama3", hidden_size=256, intermediate_size=768,
                                  num_hidden_layers=6, num_attention_heads=16,
                                  num_key_value_heads=16, initializer_range=0.02)
    prompts = [f"Sort: {'abcdefgh'[i % 8]} {'hgfedcba'[i % 7]} c" + " and more" * (i % 5)
               for i in range(args.batch)]
    prompt_file = os.path.join(tmp, "prompts.jsonl")
    common.write_jsonl(prompt_file, [{"prompt": p} for p in prompts])

    def titan(invariant):
        out = subprocess.run(
            [args.titan_rl, "--generate", "--json", "--model.name=llama3",
             "--model.flavor=from_checkpoint", f"--model.hf_assets_path={hf}",
             f"--model.tokenizer_path={common.TOKENIZER}", "--checkpoint.initial_load_in_hf",
             f"--job.dump_folder={tmp}/dump", "--training.mixed_precision_param=float32",
             f"--rl.prompts_path={prompt_file}", "--rl.temperature=0",
             f"--rl.max_new_tokens={args.new_tokens}", "--rl.max_seq_len=256",
             f"--debug.batch_invariant={'true' if invariant else 'false'}"],
            capture_output=True, text=True, check=True, env=env)
        return json.loads(out.stdout.strip().splitlines()[-1])

    # The same batch for transformers: titan's own prompt ids, left-padded.
    first = titan(False)
    rows = common.read_jsonl(first["output"])
    width = max(len(r["prompt_ids"]) for r in rows)
    ids = torch.full((len(rows), width), common.EOS, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        n = len(r["prompt_ids"])
        ids[i, width - n:] = torch.tensor(r["prompt_ids"])
        mask[i, width - n:] = 1
    # Every row runs to new_tokens on both sides (no row emitted EOS in titan's run, or it ends
    # earlier there: then titan's count is smaller and its rate is what it generated).
    print(f"batch {len(rows)}, prompt width {width}, {args.new_tokens} greedy tokens, "
          f"{torch.get_num_threads()} threads")
    # Per side, per round: (tokens per wall second, tokens per CPU second of all threads).
    rates = {"titan": [], "batch-invariant": [], "transformers": []}
    for r in range(args.rounds):
        for key, invariant in (("titan", False), ("batch-invariant", True)):
            run = titan(invariant)
            rates[key].append((run["generated_tokens"] / run["seconds"],
                               run["generated_tokens"] / run["cpu_seconds"]))
        start, cpu_start = time.perf_counter(), time.process_time()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                 pad_token_id=common.EOS)
        tokens = (out.shape[1] - width) * len(rows)
        rates["transformers"].append((tokens / (time.perf_counter() - start),
                                      tokens / (time.process_time() - cpu_start)))
        print(f"round {r + 1}: " + ", ".join(
            f"{key} {v[-1][0]:.0f} tok/s ({v[-1][1]:.0f} per CPU s)" for key, v in rates.items()))
    # The cores are shared: each side's fastest round is its least disturbed one, and the CPU time
    # its threads got is a steadier measure than the wall clock.
    best = {key: max(w for w, _ in v) for key, v in rates.items()}
    cpu = {key: statistics.median(c for _, c in v) for key, v in rates.items()}
    print(f"best of {args.rounds} (wall): "
          + ", ".join(f"{k} {v:.0f} tok/s" for k, v in best.items())
          + f"; titan/transformers {best['titan'] / best['transformers']:.2f}x, batch-invariant "
          f"cost {best['titan'] / best['batch-invariant']:.2f}x")
    print("median per CPU second: " + ", ".join(f"{k} {v:.0f} tok" for k, v in cpu.items())
          + f"; titan/transformers {cpu['titan'] / cpu['transformers']:.2f}x, batch-invariant "
          f"cost {cpu['titan'] / cpu['batch-invariant']:.2f}x")


if __name__ == "__main__":
    main()
