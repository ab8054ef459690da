"""Helpers shared by titan_rl's tests: running the tool, writing transformers checkpoints and job
files, reading metrics."""
import json
import os
import shutil
import subprocess

import torch
import transformers

TOKENIZER = "assets/default_tokenizer"
BOS, EOS = 2040, 2041  # the bundled tokenizer's


def run(cmd, timeout=1800, check=True):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stderr[-6000:]}")
    return proc


def tiny_config(family, **overrides):
    """A small random model in the bundled tokenizer's vocabulary (transformers' own classes)."""
    common = dict(vocab_size=2048, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-5, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=EOS,
                  initializer_range=0.2)
    common.update(overrides)
    if family == "qwen3":
        common.setdefault("head_dim", 32)
        common.setdefault("tie_word_embeddings", True)
        return transformers.Qwen3Config(rope_theta=1e6, **common), transformers.Qwen3ForCausalLM
    return (transformers.LlamaConfig(rope_theta=5e5, tie_word_embeddings=False, **common),
            transformers.LlamaForCausalLM)


def save_random_hf(folder, family, seed=0, **overrides):
    config, cls = tiny_config(family, **overrides)
    torch.manual_seed(seed)
    model = cls(config).eval()
    model.save_pretrained(folder)
    return model


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def metrics(dump):
    return read_jsonl(os.path.join(dump, "metrics.jsonl"))


def fresh_dir(name):
    """An empty folder `name` under the test's temporary directory."""
    root = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    return root


def short_run(titan_rl, config, dump, hf, *overrides):
    """titan_rl's command line for a short run of `config` from the transformers checkpoint `hf`:
    2 steps (unless overrides set them) of 4 prompts (x 4 samples for grpo, dapo and ppo: sft and
    dpo refuse group_size), 8 held-out prompts (unless eval_prompts_path is given), no
    checkpoints, metrics every step."""
    steps = [] if any(o.startswith("--training.steps=") for o in overrides) else [
        "--training.steps=2"]
    # eval_size sizes only the task's held-out split: refused beside eval_prompts_path.
    held_out = [] if any(o.startswith("--rl.eval_prompts_path=") for o in overrides) else [
        "--rl.eval_size=8"]
    samples = [] if os.path.basename(config) in ("rl_sft_sorting.toml", "rl_dpo_sorting.toml") else [
        "--rl.group_size=4"]
    return [titan_rl, f"--job.config_file={config}", f"--job.dump_folder={dump}",
            "--model.flavor=from_checkpoint", f"--model.hf_assets_path={hf}",
            f"--model.tokenizer_path={TOKENIZER}", f"--checkpoint.initial_load_path={hf}",
            "--checkpoint.initial_load_in_hf", "--metrics.log_freq=1", *held_out,
            "--rl.eval_freq=100", "--rl.prompts_per_step=4", "--checkpoint.enable=false", *samples,
            *steps, *overrides]
