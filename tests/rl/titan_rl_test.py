"""titan_rl as a user runs it, on a tiny transformers-written Llama (from_checkpoint) and the bundled
sorting task: batch-invariant log-probabilities, FSDP parity of one step on given rollouts, exact
resume, a failing reward scorer, refused keys."""
import argparse
import glob
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

import tokenizers
import torch
import transformers
from safetensors.torch import load_file

import common
import transformers

TITAN_RL = None
TITAN_TRAIN = None
CONVERT = None
CONFIG = "configs/rl_grpo_sorting.toml"
# What a step measures only by its optimizer steps, or on the tokens they count: left out of a step
# whose every group dynamic sampling dropped.
UPDATE_METRICS = ("loss", "grad_norm", "tps", "tflops", "mfu", "policy_loss", "clip_fraction",
                  "kl", "entropy", "logprob_diff_max")


def running(pid):
    """Whether process `pid` is alive: a killed one may stay a zombie (state Z) until the PID 1
    it was handed to reaps it, which a container's PID 1 may do late or never."""
    try:
        with open(f"/proc/{pid}/status") as f:
            state = next(line for line in f if line.startswith("State:"))
    except FileNotFoundError:
        return False
    return state.split()[1] not in ("Z", "X")


class TitanRlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = common.fresh_dir("titan_rl_test")
        cls.hf = os.path.join(cls.root, "hf")
        common.save_random_hf(cls.hf, "llama3", initializer_range=0.02)

    def job(self, name, *overrides, config=CONFIG):
        """titan_rl's command line for a short run of `config` (GRPO) in its own dump folder."""
        dump = os.path.join(self.root, name)
        return dump, common.short_run(TITAN_RL, config, dump, self.hf, *overrides)

    @staticmethod
    def algorithm(name):
        """Flags that switch CONFIG (GRPO with dynamic sampling, which PPO refuses) to `name`."""
        return [f"--rl.algorithm={name}"] + (["--rl.dynamic_sampling=false"] if name == "ppo" else [])

    def test_batch_invariant_logprobs_are_the_trainers(self):
        # First epoch over the whole batch: PPO (value head, reference KL in the reward) and GRPO.
        # The old log-probabilities are the generator's (exactly the trainer's in batch-invariant
        # mode) or recomputed by the trainer ([rl] old_logprobs): exactly its own either way.
        for algorithm, invariant, old in (("ppo", True, "generator"), ("ppo", False, "generator"),
                                          ("ppo", False, "trainer"), ("grpo", False, "trainer")):
            name = f"{algorithm}_bi_{invariant}_{old}"
            # Without dynamic sampling: a random model's equal rewards would drop every group.
            dump, cmd = self.job(name, *self.algorithm(algorithm), "--rl.kl_coef=0.05",
                                 "--rl.dynamic_sampling=false",
                                 f"--debug.batch_invariant={str(invariant).lower()}",
                                 f"--rl.old_logprobs={old}")
            common.run(cmd)
            rows = [m for m in common.metrics(dump) if m["step"] > 0]
            self.assertEqual(len(rows), 2)
            diffs = [m["logprob_diff_max"] for m in rows]
            print(f"{name}: max |old - trainer| log-prob per step {diffs}")
            if invariant or old == "trainer":
                self.assertEqual(diffs, [0.0, 0.0])  # the PPO ratio at the first epoch is exactly 1
            else:
                self.assertLess(max(diffs), 1e-3)

    def test_dpo_ties_count_one_half_in_training_as_in_eval(self):
        # Step 1's forward is the reference's weights: every margin is 0, bitwise in this mode.
        dump, cmd = self.job("dpo_ties", "--debug.batch_invariant=true", "--training.steps=1",
                             config="configs/rl_dpo_sorting.toml")
        common.run(cmd)
        rows = common.metrics(dump)
        self.assertEqual(rows[0]["eval_preference_accuracy"], 0.5)
        self.assertEqual(rows[1]["step"], 1)
        self.assertEqual(rows[1]["reward_margin"], 0.0)
        self.assertEqual(rows[1]["preference_accuracy"], 0.5)

    def test_no_held_out_set_logs_no_evaluation(self):
        # prompts_path without eval_prompts_path (nor a task): nothing is evaluated, so
        # metrics.jsonl has no eval key (a 0 would read as measured) and no step 0 row.
        prompts = os.path.join(self.root, "not_held_out.jsonl")
        common.write_jsonl(prompts, [{"prompt": f"Sort: {c} a", "answer": f"a {c}",
                                      "chosen": f" #### a {c}", "rejected": f" #### {c} a"}
                                     for c in "bcde"])
        for config, key in (("configs/rl_grpo_sorting.toml", "eval_reward"),
                            ("configs/rl_dpo_sorting.toml", "eval_preference_accuracy")):
            dump, cmd = self.job(f"no_held_out_{key}", "--rl.task=", f"--rl.prompts_path={prompts}",
                                 "--training.steps=1", config=config)
            cmd.remove("--rl.eval_size=8")  # refused without a task
            # So is an eval_freq (short_run's 100, over the config's): it would space nothing.
            proc = common.run(cmd, check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
            self.assertIn("[rl] eval_freq = 100: only a held-out set is evaluated, and there is "
                          "none (give [rl] eval_prompts_path, or a bundled task for its split); "
                          "remove it", proc.stderr)
            cmd[cmd.index("--rl.eval_freq=100")] = "--rl.eval_freq=10"  # the default, spelled out
            self.assertIn("4 training examples, 0 held out", common.run(cmd).stderr)
            rows = common.metrics(dump)
            self.assertEqual([m["step"] for m in rows], [1])
            self.assertNotIn(key, rows[0])

    def test_throughput_counts_the_updates_forward_and_backward_passes(self):
        # tps: the sequences' tokens per second; tflops: ppo_epochs forward + backward passes
        # over them in that time, at torchtitan's FLOPs per token (6 per matmul weight + the
        # attention's 12·layers·heads·head_dim·width), width that of the laid-out batch.
        path = self.rollouts()
        _, cmd = self.job("throughput", "--rl.ppo_epochs=2", "--rl.old_logprobs=trainer", "--json")
        cmd.insert(1, f"--step_rollouts={path}")
        summary = json.loads(common.run(cmd).stdout)
        tokenizer = tokenizers.Tokenizer.from_file(f"{common.TOKENIZER}/tokenizer.json")
        rows = common.read_jsonl(path)
        width = (max(1 + len(tokenizer.encode(r["prompt"], add_special_tokens=False).ids)
                     for r in rows) +
                 max(len(tokenizer.encode(r["response"], add_special_tokens=False).ids)
                     for r in rows))  # a prompt takes a BOS; a given response is taken as it is
        config, _ = common.tiny_config("llama3")
        model = transformers.LlamaForCausalLM(config)
        matmul_params = (sum(p.numel() for p in model.parameters()) -
                         model.model.embed_tokens.weight.numel())
        head_dim = config.hidden_size // config.num_attention_heads
        flops_per_token = (6 * matmul_params + 12 * config.num_hidden_layers *
                           config.num_attention_heads * head_dim * width)
        self.assertGreater(summary["tps"], 0)
        self.assertIsNone(summary["mfu"])  # no published peak for a CPU
        self.assertAlmostEqual(summary["tflops"] * 1e12 / summary["tps"] / (2 * flops_per_token),
                               1, places=9)
        # A training step's tps takes generation and scoring in as well: both rates are set.
        dump, cmd = self.job("throughput_training", "--training.steps=1",
                             "--rl.dynamic_sampling=false")
        common.run(cmd)
        row = common.metrics(dump)[-1]
        self.assertGreater(row["tps"], 0)
        self.assertGreater(row["tflops"], 0)

    def test_more_prompts_per_step_than_prompts_is_refused(self):
        # A step would take a prompt twice (two groups of it, double weight): said before any step.
        prompts = os.path.join(self.root, "three_prompts.jsonl")
        common.write_jsonl(prompts, [{"prompt": f"Sort: {c} a", "answer": f"a {c}",
                                      "response": f" #### a {c}"} for c in "bcd"])
        for config, hint in ((CONFIG, " (group_size sets the samples per prompt)"),
                             ("configs/rl_sft_sorting.toml", "")):
            _, cmd = self.job(f"few_prompts_{os.path.basename(config)}",
                                 f"--rl.prompts_path={prompts}", config=config)
            proc = common.run(cmd, check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
            self.assertIn(f"[rl] prompts_per_step = 4 exceeds the 3 training examples of [rl] "
                          f"prompts_path = {prompts}: each step would repeat some of them; set "
                          f"prompts_per_step <= 3{hint} or give more examples", proc.stderr)

    def rollouts(self, second_reward=1.0):
        """Fixed rollouts: two prompts, four responses each, rewards 0 (wrong) or 1 (right; the
        second prompt's `second_reward`)."""
        rows = []
        for prompt, good, reward in [("Sort: c a b", "a b c", 1.0),
                                     ("Sort: h e f", "e f h", second_reward)]:
            for g in range(4):
                response = f" #### {good}" if g % 2 == 0 else " #### b a c"
                rows.append({"prompt": prompt, "response": response,
                             "reward": reward if g % 2 == 0 else 0.0})
        path = os.path.join(self.root, f"rollouts_{second_reward}.jsonl")
        common.write_jsonl(path, rows)
        return path

    def step_on_rollouts(self, name, *flags, second_reward=1.0):
        """One titan_rl step on self.rollouts(): its JSON summary and the weights it wrote."""
        dump, cmd = self.job("step_" + name, "--rl.kl_coef=0.05", "--rl.ppo_epochs=2",
                             "--rl.learning_rate=1e-5", "--json", *flags)
        cmd.insert(1, f"--step_rollouts={self.rollouts(second_reward)}")
        summary = json.loads(common.run(cmd).stdout)  # one line, with any --nproc_per_node
        return summary, load_file(summary["weights"])

    def assert_same_step(self, a, b, names, tolerance):
        """Two steps' metrics within `tolerance` relative, their weights within it absolute."""
        (one, w_one), (other, w_other) = a, b
        for key in ("grad_norm", "entropy", "kl"):
            rel = abs(one[key] - other[key]) / max(abs(one[key]), 1e-12)
            print(f"{key}: {names[0]} {one[key]:.9g}, {names[1]} {other[key]:.9g}, "
                  f"relative {rel:.2e}")
            if key == "kl":
                # kl ~ r^2 / 2 of the log-ratio r (~1e-3 after one step): log-probs of size ~entropy
                # off by `tolerance` relative move it by ~sqrt(2 kl) * entropy * tolerance.
                scale = max(abs(one[key]), math.sqrt(2 * abs(one[key])) * abs(one["entropy"]))
                self.assertLess(abs(one[key] - other[key]), tolerance * scale, key)
                continue
            self.assertLess(rel, tolerance, key)
        worst = max((w_one[k] - w_other[k]).abs().max().item() for k in w_one)
        print(f"weights after 2 AdamW steps: max |{names[0]} - {names[1]}| = {worst:.2e}")
        self.assertLess(worst, tolerance)

    def test_fsdp_step_on_given_rollouts_equals_one_process(self):
        # Microbatches of 2 rows: FSDP's no-grad forwards (old log-probabilities, the reference's)
        # share one gather of each model ([rl] gather_for_generation).
        one = self.step_on_rollouts("one", "--training.local_batch_size=2")
        fsdp = self.step_on_rollouts("fsdp2", "--nproc_per_node=2",
                                     "--parallelism.data_parallel_shard_degree=2",
                                     "--training.local_batch_size=2")
        # 1e-5: ranks sum their halves' gradients and token counts in another order.
        self.assert_same_step(one, fsdp, ("1 process", "FSDP 2"), 1e-5)
        # The loss is the mean over both epochs (the first's is 0: advantages ±1 over equal tokens).
        self.assertLess(abs(one[0]["loss"] - fsdp[0]["loss"]), 1e-7)

    def test_ppo_whitening_over_two_ranks_equals_one_process(self):
        # Each rank holds one prompt's rollouts, whose rewards (1 vs 3) give the ranks other
        # advantage statistics: whitened over the global batch, the step is the one process's.
        flags = [*self.algorithm("ppo"), "--rl.whiten_advantages=true",
                 "--training.local_batch_size=2"]
        one = self.step_on_rollouts("ppo_one", *flags, second_reward=3.0)
        # DDP: FSDP's sharded gradient reduction alone moves the norm by ~6e-6 relative.
        two = self.step_on_rollouts("ppo_two", "--nproc_per_node=2", *flags,
                                    "--parallelism.data_parallel_replicate_degree=2",
                                    "--parallelism.data_parallel_shard_degree=1",
                                    second_reward=3.0)
        # 1e-6: the ranks sum their halves' statistics and gradients in another order (fp32).
        self.assert_same_step(one, two, ("1 process", "2 processes"), 1e-6)
        for key in ("loss", "value_loss"):
            self.assertLess(abs(one[0][key] - two[0][key]), 1e-6 * max(abs(one[0][key]), 1e-6), key)

    def test_chunked_head_equals_full_logits(self):
        # [training] loss_chunk_size: log-probabilities and entropies 5 tokens at a time, PPO (its
        # value head too) and GRPO. 1e-5: fp32, the head's matmul in chunks instead of one.
        for algorithm in ("ppo", "grpo"):
            full = self.step_on_rollouts(f"{algorithm}_full", *self.algorithm(algorithm))
            chunked = self.step_on_rollouts(f"{algorithm}_chunked", *self.algorithm(algorithm),
                                            "--training.loss_chunk_size=5")
            self.assert_same_step(full, chunked, ("full", "chunked"), 1e-5)

    def test_resume_reproduces_the_uninterrupted_run(self):
        # Rewards that vary with the responses (their length mod 3), so the policy moves.
        common_flags = ["--checkpoint.enable=true", "--checkpoint.interval=2",
                        "--checkpoint.last_save_model_only=false", "--rl.kl_coef=0.05",
                        "--rl.reward=command", "--rl.reward_command=awk '{print length($0) % 3}'"]
        whole, cmd = self.job("whole", *common_flags, "--training.steps=4")
        common.run(cmd)
        parts, cmd = self.job("parts", *common_flags, "--training.steps=2")
        common.run(cmd)
        cmd[cmd.index("--training.steps=2")] = "--training.steps=4"
        common.run(cmd)
        a = [m for m in common.metrics(whole) if m["step"] > 2]
        b = [m for m in common.metrics(parts) if m["step"] > 2]
        self.assertEqual([m["step"] for m in b], [3, 4])
        for x, y in zip(a, b):
            for key in ("loss", "reward_mean", "reward_std", "kl", "grad_norm", "entropy"):
                self.assertEqual(x[key], y[key], f"step {x['step']} {key}")  # bitwise
        ra = [r for r in common.read_jsonl(os.path.join(whole, "rollouts.jsonl")) if r["step"] > 2]
        rb = [r for r in common.read_jsonl(os.path.join(parts, "rollouts.jsonl")) if r["step"] > 2]
        self.assertEqual(ra, rb)
        print(f"resumed at step 2: steps 3-4 equal bitwise ({len(ra)} rollouts, "
              f"losses {[m['loss'] for m in b]})")

    def test_a_resume_with_a_drawn_seed_keeps_the_runs_reference(self):
        # seed = -1 without an initial load: the KL reference is the drawn seed's weights, so a
        # resume rebuilds it from the seed its run recorded (a new one was a different model).
        flags = ["--checkpoint.enable=true", "--checkpoint.interval=2",
                 "--checkpoint.last_save_model_only=false", "--checkpoint.initial_load_path=",
                 "--checkpoint.initial_load_in_hf=false", "--rl.kl_coef=0.05", "--rl.reward=command",
                 "--rl.reward_command=awk '{print length($0) % 3}'"]
        parts, cmd = self.job("drawn_seed", *flags, "--training.seed=-1", "--training.steps=2")
        drawn = re.search(r"\[training\] seed = -1: drew seed (\d+)", common.run(cmd).stderr)
        self.assertIsNotNone(drawn)
        cmd[cmd.index("--training.steps=2")] = "--training.steps=4"
        self.assertIn(f"[training] seed = -1: using seed {drawn[1]}", common.run(cmd).stderr)
        whole, cmd = self.job("drawn_seed_whole", *flags, f"--training.seed={drawn[1]}",
                              "--training.steps=4")
        common.run(cmd)
        a = [m for m in common.metrics(whole) if m["step"] > 2]
        b = [m for m in common.metrics(parts) if m["step"] > 2]
        self.assertEqual([m["step"] for m in b], [3, 4])
        for x, y in zip(a, b):
            for key in ("loss", "kl", "reward_mean", "grad_norm"):
                self.assertEqual(x[key], y[key], f"step {x['step']} {key}")  # bitwise
        print(f"seed {drawn[1]} recorded: resumed steps 3-4 equal a run seeded with it "
              f"(kl {[m['kl'] for m in b]})")

    def test_a_run_from_a_seed_checkpoint_keeps_it_as_its_reference(self):
        # convert_checkpoint's step-0 of the transformers weights is the run's start: the KL
        # reference reads it too (not the seed's weights), keep_latest_k keeps it, and a resume
        # reads it again: every step equals a run that loaded those weights with initial_load_path.
        flags = ["--rl.kl_coef=0.05", "--rl.reward=command",
                 "--rl.reward_command=awk '{print length($0) % 3}'", "--training.steps=4"]
        loaded, cmd = self.job("seed_ckpt_reference_loaded", *flags)
        common.run(cmd)
        seeded, cmd = self.job("seed_ckpt_reference", *flags, "--checkpoint.enable=true",
                               "--checkpoint.interval=1", "--checkpoint.keep_latest_k=2",
                               "--checkpoint.last_save_model_only=false",
                               "--checkpoint.initial_load_path=",
                               "--checkpoint.initial_load_in_hf=false")
        common.run([CONVERT, "--from=hf", "--to=titan", self.hf,
                    os.path.join(seeded, "checkpoint")])
        cmd[cmd.index("--training.steps=4")] = "--training.steps=2"
        common.run(cmd)
        self.assertEqual(sorted(os.listdir(os.path.join(seeded, "checkpoint"))),
                         [".titan.lock", "step-0", "step-1", "step-2"])
        # A run without a reference keeps it too: a later one may resume with one.
        no_kl, no_kl_cmd = self.job("seed_ckpt_no_reference", "--rl.kl_coef=0",
                                    "--training.steps=3", *cmd[-6:])
        common.run([CONVERT, "--from=hf", "--to=titan", self.hf, os.path.join(no_kl, "checkpoint")])
        common.run(no_kl_cmd)
        self.assertEqual(sorted(os.listdir(os.path.join(no_kl, "checkpoint"))),
                         [".titan.lock", "step-0", "step-2", "step-3"])
        cmd[cmd.index("--training.steps=2")] = "--training.steps=4"
        common.run(cmd)
        a, b = common.metrics(loaded), common.metrics(seeded)
        self.assertEqual([m["step"] for m in a if m["step"] > 0], [1, 2, 3, 4])
        self.assertEqual([m["step"] for m in b if m["step"] > 0], [1, 2, 3, 4])
        for x, y in zip(a, b):
            for key in ("loss", "kl", "reward_mean", "grad_norm"):
                self.assertEqual(x.get(key), y.get(key), f"step {x['step']} {key}")  # bitwise
        print(f"from a seed checkpoint: steps 1-4 equal an initial-load run "
              f"(kl {[m.get('kl') for m in b]})")

    def test_ppo_resumes_only_a_step_whose_critic_was_saved(self):
        # PPO saves the critic's step beside the policy's (a trailing '/' on the folder too); a run
        # that died between the two (one of them removed) resumes step 2, the newest pair, and
        # redoes steps 3-4 bitwise.
        dump, cmd = self.job("ppo_pair", *self.algorithm("ppo"), "--checkpoint.enable=true",
                             "--checkpoint.folder=checkpoint/",
                             "--checkpoint.interval=2", "--checkpoint.last_save_model_only=false",
                             "--checkpoint.async_mode=async",
                             "--training.steps=4", "--rl.kl_coef=0.05", "--rl.reward=command",
                             "--rl.reward_command=awk '{print length($0) % 3}'")
        common.run(cmd)
        first = [m for m in common.metrics(dump) if m["step"] > 2]
        self.assertEqual([m["step"] for m in first], [3, 4])
        keys = ("loss", "value_loss", "explained_variance", "reward_mean", "kl", "grad_norm")
        policy, critic = os.path.join(dump, "checkpoint"), os.path.join(dump, "checkpoint_critic")
        for step in ("step-2", "step-4"):
            # The critic's step is written whole before the policy's (which a resume keys on).
            mtimes = lambda d: [os.stat(f).st_mtime_ns for f in glob.glob(os.path.join(d, "*"))]
            self.assertLessEqual(max(mtimes(os.path.join(critic, step))),
                                 min(mtimes(os.path.join(policy, step))), step)
        for removed, kept in ((critic, policy), (policy, critic)):
            shutil.rmtree(os.path.join(removed, "step-4"))
            proc = common.run(cmd)
            self.assertIn("resumed from checkpoint step-2", proc.stderr)
            if removed == critic:
                self.assertIn(f"{critic}/step-4 is missing", proc.stderr)
            self.assertTrue(glob.glob(os.path.join(kept, "step-4.abandoned-*")),
                            os.listdir(kept))  # set aside, not loaded
            again = [m for m in common.metrics(dump) if m["step"] > 2]
            self.assertEqual([m["step"] for m in again], [3, 4])
            for x, y in zip(first, again):
                for key in keys:
                    self.assertEqual(x[key], y[key], f"{removed}: step {x['step']} {key}")
            for aside in glob.glob(os.path.join(kept, "step-4.abandoned-*")):
                shutil.rmtree(aside)
        # A load_step whose critic is missing is refused, naming the folder.
        shutil.rmtree(os.path.join(critic, "step-2"))
        proc = common.run(cmd + ["--checkpoint.load_step=2"], check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertIn(f"[checkpoint] load_step = 2: {critic}/step-2 is missing", proc.stderr)
        print("PPO: a step without its critic (or policy) set aside; steps 3-4 redone bitwise")

    def test_resume_drops_the_rollouts_of_the_steps_it_redoes(self):
        # A run that died during step 4 after saving step 2 (its step-4 checkpoint removed):
        # the rerun redoes steps 3 and 4, whose rows the dead run wrote, and they go.
        dump, cmd = self.job("redo", "--checkpoint.enable=true", "--checkpoint.interval=2",
                             "--checkpoint.last_save_model_only=false", "--training.steps=4",
                             "--rl.reward=command",
                             "--rl.reward_command=awk '{print length($0) % 3}'")
        common.run(cmd)
        path = os.path.join(dump, "rollouts.jsonl")
        first = common.read_jsonl(path)
        shutil.rmtree(os.path.join(dump, "checkpoint", "step-4"))
        common.run(cmd)
        again = common.read_jsonl(path)
        self.assertEqual([r["step"] for r in again], [r["step"] for r in first])
        self.assertEqual([r["step"] for r in again], sorted(r["step"] for r in again))
        self.assertEqual(again, first)  # the redone steps sample what they did
        self.assertEqual([m["step"] for m in common.metrics(dump)], [0, 1, 2, 3, 4])

    def test_resume_on_fewer_ranks_drops_the_redone_rollouts_of_every_rank(self):
        # Two ranks save step 2 and die in step 3 (its checkpoint removed); one process redoes it:
        # rank 1's file loses its step-3 rows too.
        dump, cmd = self.job("redo_fewer", "--checkpoint.enable=true", "--checkpoint.interval=2",
                             "--checkpoint.last_save_model_only=false", "--training.steps=3")
        common.run(cmd[:1] + ["--nproc_per_node=2"] + cmd[1:])
        rank1 = os.path.join(dump, "rollouts_rank1.jsonl")
        self.assertEqual({r["step"] for r in common.read_jsonl(rank1)}, {1, 2, 3})
        shutil.rmtree(os.path.join(dump, "checkpoint", "step-3"))
        common.run(cmd)
        self.assertEqual({r["step"] for r in common.read_jsonl(rank1)}, {1, 2})
        self.assertEqual([m["step"] for m in common.metrics(dump)], [0, 1, 2, 3])

    def test_a_run_that_starts_over_sets_the_earlier_rollouts_aside(self):
        # A fresh run (no checkpoint to continue) counts from step 1 again: one row set per step.
        dump, cmd = self.job("fresh_twice", "--training.steps=1")
        common.run(cmd)
        common.run(cmd)
        self.assertEqual({r["step"] for r in common.read_jsonl(os.path.join(dump, "rollouts.jsonl"))},
                         {1})
        aside = glob.glob(os.path.join(dump, "rollouts.jsonl.abandoned-*"))
        self.assertEqual(len(aside), 1, aside)
        self.assertEqual({r["step"] for r in common.read_jsonl(aside[0])}, {1})
        # So does a restart (train_state not loaded), at its first save, with the metrics rows.
        ckpt = ["--checkpoint.enable=true", "--checkpoint.last_save_model_only=false"]
        dump, cmd = self.job("restart_rollouts", *ckpt, "--training.steps=2")
        common.run(cmd)
        _, cmd = self.job("restart_rollouts", *ckpt, "--training.steps=1",
                          "--checkpoint.exclude_from_loading=train_state")
        common.run(cmd)
        self.assertEqual({r["step"] for r in common.read_jsonl(os.path.join(dump, "rollouts.jsonl"))},
                         {1})
        aside = glob.glob(os.path.join(dump, "rollouts.jsonl.abandoned-*"))
        self.assertEqual(len(aside), 1, aside)
        self.assertEqual({r["step"] for r in common.read_jsonl(aside[0])}, {1, 2})
        self.assertEqual([m["step"] for m in common.metrics(dump)], [0, 1])

    def test_a_resumed_run_warns_when_its_steps_end_no_profiling_cycle(self):
        # As titan_train: startup sees steps = 3 >= profile_freq = 2, but resumed at step 2 the
        # run trains step 3 only, which ends no cycle; said once the step is known.
        ckpt = ["--checkpoint.enable=true", "--checkpoint.last_save_model_only=false",
                "--rl.dynamic_sampling=false"]
        dump, cmd = self.job("resumed_profiling", *ckpt, "--training.steps=2")
        common.run(cmd)
        _, cmd = self.job("resumed_profiling", *ckpt, "--training.steps=3",
                          "--profiling.enable_profiling=true", "--profiling.profile_freq=2",
                          "--profiling.profiler_warmup=0", "--profiling.profiler_active=1")
        proc = common.run(cmd)
        self.assertIn("[profiling] profile_freq = 2 has no multiple in steps 3 to 3, which this run "
                      "trains after resuming step 2 (no cycle ends: no trace or snapshot is "
                      "written): enable_profiling has no effect", proc.stderr)
        folder = os.path.join(dump, "profile_traces")
        self.assertEqual(os.listdir(folder) if os.path.exists(folder) else [], [])

    def test_profiling_and_monitoring_act_as_in_titan_train(self):
        dump, cmd = self.job("profiled", "--profiling.enable_profiling=true",
                             "--profiling.profile_freq=2", "--profiling.profiler_warmup=0",
                             "--profiling.profiler_active=1", "--job.monitoring_interval=1",
                             # A slow scorer: the run outlasts the monitor's first interval.
                             "--rl.reward=command", "--rl.reward_command=sleep 1.2; awk '{print 0}'",
                             # Equal rewards: without it every group is dropped and nothing updates.
                             "--rl.dynamic_sampling=false")
        proc = common.run(cmd)
        with open(os.path.join(dump, "profile_traces", "iteration_2", "rank0_trace.json")) as f:
            trace = json.load(f)
        names = {e.get("name") for e in trace["traceEvents"]}
        # One process: the rank HolisticTraceAnalysis needs, which torch.profiler leaves out.
        self.assertEqual(trace["distributedInfo"], {"rank": 0, "world_size": 1})
        self.assertIn("ProfilerStep#2", names)
        # The step's phases, as titan_train's trace names them, and RL's own.
        for phase in ("generation", "scoring", "forward", "backward", "optimizer"):
            self.assertIn(phase, names)
        self.assertIn("monitor: host", proc.stderr)
        # A CUDA-only key is refused here as it is by titan_train, not ignored.
        proc = common.run(self.job("snapshot", "--profiling.enable_memory_snapshot=true")[1],
                          check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertIn("[profiling] enable_memory_snapshot", proc.stderr)

    def test_an_unreadable_prompts_file_names_its_key(self):
        for key in ("prompts_path", "eval_prompts_path"):
            proc = common.run(self.job(f"no_{key}", f"--rl.{key}=/nonexistent.jsonl")[1],
                              check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
            self.assertIn(f"[rl] {key}: /nonexistent.jsonl", proc.stderr)

    def test_a_dump_folder_that_is_a_file_names_its_key(self):
        path = os.path.join(self.root, "dump_is_a_file")
        with open(path, "w") as f:
            f.write("mine\n")
        for mode in ([], ["--generate"]):
            proc = common.run(self.job("dump_is_a_file", *mode)[1], check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
            self.assertIn(f"titan_rl: --job.dump_folder: [job] dump_folder: {path}: is a file, "
                          "not a folder", proc.stderr)

    def test_a_run_that_never_stepped_resumes(self):
        # Equal rewards: dynamic sampling drops every group, so step 1 takes no optimizer step.
        dump, cmd = self.job("never_stepped", "--checkpoint.enable=true",
                             "--checkpoint.last_save_model_only=false", "--training.steps=1",
                             "--rl.reward=command", "--rl.reward_command=awk '{print 0}'")
        common.run(cmd)
        self.assertEqual(common.metrics(dump)[-1]["optimizer_steps"], 0)
        cmd[cmd.index("--training.steps=1")] = "--training.steps=2"
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        self.assertIn("resumed from checkpoint step-1", proc.stderr)
        self.assertEqual([m["step"] for m in common.metrics(dump)], [0, 1, 2])

    def test_a_resume_reads_the_initial_weights_only_for_the_reference(self):
        # The resumed step holds the policy: initial_load_path may move once the run has saved,
        # unless a KL reference (the run's starting weights, which no step holds) needs it.
        initial = os.path.join(self.root, "moved_initial")
        shutil.rmtree(initial, ignore_errors=True)
        shutil.copytree(self.hf, initial)
        ckpt = ["--checkpoint.enable=true", "--checkpoint.last_save_model_only=false",
                f"--checkpoint.initial_load_path={initial}", "--rl.kl_coef=0"]
        dump, cmd = self.job("moved_initial_run", *ckpt, "--training.steps=1")
        common.run(cmd)
        shutil.rmtree(initial)
        cmd[cmd.index("--training.steps=1")] = "--training.steps=2"
        proc = common.run(cmd)
        self.assertIn("resumed from checkpoint step-1", proc.stderr)
        self.assertIn("[checkpoint] initial_load_path not read", proc.stderr)
        self.assertEqual([m["step"] for m in common.metrics(dump)][-1], 2)
        cmd[cmd.index("--rl.kl_coef=0")] = "--rl.kl_coef=0.05"
        cmd[cmd.index("--training.steps=2")] = "--training.steps=3"
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn("the frozen reference (the run's starting weights): [checkpoint] "
                      f"initial_load_path: {initial}: no such file", proc.stderr)

    def test_generate_and_step_rollouts_name_their_weights_and_refuse_random_ones(self):
        # Without a checkpoint or an initial load (a mistyped dump folder, say) the policy is a
        # random one: refused unless --random_weights asks for it; the summary names the weights.
        no_load = ["--checkpoint.initial_load_path=", "--checkpoint.initial_load_in_hf=false"]
        output = os.path.join(self.root, "weights_generated.jsonl")
        for name, mode in (("generate", ["--generate", f"--output={output}"]),
                           ("step", [f"--step_rollouts={self.rollouts()}"])):
            stderr = self.refusal(f"random_{name}", *mode, *no_load)
            self.assertIn("the policy would be randomly initialised: [checkpoint] enable = false "
                          "and no [checkpoint] initial_load_path; set one, or pass "
                          "--random_weights to use a random model", stderr)
            # A refused run leaves nothing behind: its (mistyped) dump folder is not made.
            self.assertFalse(os.path.exists(os.path.join(self.root, f"random_{name}")))
            _, cmd = self.job(f"random_{name}_asked", *mode, *no_load, "--random_weights", "--json")
            proc = common.run(cmd)
            self.assertEqual(json.loads(proc.stdout)["weights_from"], "random initialisation")
            self.assertIn("--random_weights: the policy is randomly initialised", proc.stderr)
            _, cmd = self.job(f"loaded_{name}", *mode, "--json")
            self.assertEqual(json.loads(common.run(cmd).stdout)["weights_from"], self.hf)
            # Asked for beside weights to load, a random policy is refused, not silently loaded.
            stderr = self.refusal(f"random_{name}_loaded", *mode, "--random_weights")
            self.assertIn(f"--random_weights asks for a random policy, but the policy loads "
                          f"{self.hf}: --random_weights is for a run with no checkpoint under "
                          "[job] dump_folder and no [checkpoint] initial_load_path; drop it, or "
                          "unset those", stderr)
        # A run's checkpoint replaces the initial load.
        ckpt = ["--checkpoint.enable=true", "--checkpoint.last_save_model_only=false"]
        dump, cmd = self.job("weights_trained", *ckpt, "--training.steps=1")
        common.run(cmd)
        _, cmd = self.job("weights_trained", *ckpt, "--generate", f"--output={output}", "--json")
        self.assertEqual(json.loads(common.run(cmd).stdout)["weights_from"],
                         os.path.join(dump, "checkpoint", "step-1"))

    def test_generate_reads_a_runs_steps_without_changing_them(self):
        # A run ends in a model-only export (last_save_model_only): --generate loads it; an older
        # load_step reads that step and leaves the newer ones where they are (the folder is the
        # training run's, not generation's).
        ckpt = ["--checkpoint.enable=true", "--checkpoint.interval=1",
                "--checkpoint.last_save_model_only=true"]
        dump, cmd = self.job("generate_read_only", *ckpt, "--training.steps=2")
        common.run(cmd)
        def steps():
            return sorted(n for n in os.listdir(os.path.join(dump, "checkpoint"))
                          if n.startswith("step-"))
        self.assertEqual(steps(), ["step-1", "step-2"])
        output = os.path.join(self.root, "read_only_generated.jsonl")
        for load_step, expected in (("-1", "step-2"), ("1", "step-1")):
            _, cmd = self.job("generate_read_only", *ckpt, "--generate", f"--output={output}",
                              f"--checkpoint.load_step={load_step}", "--json")
            proc = common.run(cmd)
            self.assertEqual(json.loads(proc.stdout)["weights_from"],
                             os.path.join(dump, "checkpoint", expected))
            self.assertEqual(steps(), ["step-1", "step-2"])

    def test_another_kind_of_run_does_not_resume_the_steps(self):
        ckpt = ["--checkpoint.enable=true", "--checkpoint.last_save_model_only=false"]
        dump, cmd = self.job("sft_then_grpo", *ckpt, "--training.steps=1",
                             config="configs/rl_sft_sorting.toml")
        common.run(cmd)
        _, cmd = self.job("sft_then_grpo", *ckpt, "--training.steps=2")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertIn("step-1 was saved by a rl/sft run, so this rl/grpo run cannot resume it",
                      proc.stderr)
        proc = common.run([TITAN_TRAIN, "--job.config_file=configs/llama3_debugmodel.toml",
                           f"--job.dump_folder={dump}", "--model.flavor=from_checkpoint",
                           f"--model.hf_assets_path={self.hf}", "--training.steps=2",
                           "--checkpoint.last_save_model_only=false"], check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertIn("was saved by a rl/sft run, so this train run cannot resume it", proc.stderr)
        self.assertEqual([m["step"] for m in common.metrics(dump)], [0, 1])  # the SFT run's
        with open(os.path.join(dump, "config.toml")) as f:
            self.assertIn('algorithm = "sft"', f.read())  # a refused run leaves it

    def test_sigterm_finishes_the_step_saves_and_exits_zero(self):
        dump, cmd = self.job("sigterm", "--checkpoint.enable=true", "--checkpoint.interval=1000",
                             "--checkpoint.last_save_model_only=false", "--training.steps=1000",
                             "--metrics.log_freq=1000", "--rl.eval_freq=1000")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        path = os.path.join(dump, "metrics.jsonl")
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(path) and any(r["step"] >= 1 for r in common.read_jsonl(path)):
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=300)
        self.assertEqual(proc.returncode, 0, stderr[-3000:])
        self.assertIn("stopping after step", stderr)
        steps = [n for n in os.listdir(os.path.join(dump, "checkpoint")) if n.startswith("step-")]
        self.assertEqual(len(steps), 1, steps)
        stopped_after = int(steps[0].split("-")[1])
        self.assertLess(stopped_after, 1000)
        # The step it stopped after has its metrics row, once, whether a log step or not.
        logged = [m["step"] for m in common.metrics(dump)]
        self.assertEqual(logged[-1], stopped_after, logged)
        self.assertEqual(logged.count(stopped_after), 1, logged)

    def test_sigterm_while_the_scorer_runs_kills_it_and_exits_at_once(self):
        # The scorer serves the 8 held-out prompts at step 0, then hangs on step 1's 16 rollouts.
        pid_file = os.path.join(self.root, "hung_scorer.pid")
        script = (f"n=$(wc -l); if [ $n -gt 8 ]; then echo $$ >{pid_file}; exec sleep 300; fi; "
                  "yes 0 | head -n $n")
        dump, cmd = self.job("sigterm_scorer", "--checkpoint.enable=true",
                             "--checkpoint.interval=1000", "--checkpoint.last_save_model_only=false",
                             "--rl.reward=command", f"--rl.reward_command={script}",
                             "--rl.reward_timeout_seconds=250")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and not os.path.exists(pid_file):
            time.sleep(0.2)
        time.sleep(0.5)  # the pid is written
        with open(pid_file) as f:
            scorer = int(f.read())
        start = time.time()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
        self.assertLess(time.time() - start, 30)
        # Step 1 cannot finish without its rewards: nothing is saved, so not 0 but the signal's.
        self.assertEqual(proc.returncode, -signal.SIGTERM, stderr[-3000:])
        self.assertIn("received signal 15 while waiting for the scorer", stderr)
        self.assertFalse(running(scorer), "the scorer outlived titan_rl")
        self.assertEqual(glob.glob(os.path.join(dump, "checkpoint", "step-*")), [])
        self.assertEqual([m["step"] for m in common.metrics(dump)], [0])

    def test_failing_scorer_is_a_clear_error_and_keeps_the_rollouts(self):
        # The scorer serves the 8 held-out prompts at step 0, then fails on the 16 rollouts.
        script = ("n=$(wc -l); if [ $n -gt 8 ]; then echo scorer broke >&2; exit 3; fi; "
                  "yes 0 | head -n $n")
        dump, cmd = self.job("scorer", "--rl.reward=command", f"--rl.reward_command={script}")
        proc = common.run(cmd, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("exit status 3", proc.stderr)
        self.assertIn("scorer broke", proc.stderr)
        rows = common.read_jsonl(os.path.join(dump, "rollouts.jsonl"))
        self.assertEqual(len(rows), 16)
        self.assertTrue(all(r["reward"] is None and "response" in r for r in rows))

    def replay_epochs(self, rows, epochs, lr):
        """The GRPO update (population std, dynamic sampling, clip 0.2/0.28) restated in torch on
        self.hf, one AdamW step per epoch: each epoch's loss, clip fraction and gradient norm."""
        tok = transformers.PreTrainedTokenizerFast(
            tokenizer_file=os.path.join(common.TOKENIZER, "tokenizer.json"))
        model = transformers.LlamaForCausalLM.from_pretrained(self.hf).float()
        prompts = [[common.BOS] + tok(r["prompt"], add_special_tokens=False)["input_ids"]
                   for r in rows]
        responses = [tok(r["response"], add_special_tokens=False)["input_ids"] for r in rows]
        rewards = torch.tensor([r["reward"] for r in rows], dtype=torch.float64).view(-1, 4)
        centred = rewards - rewards.mean(1, keepdim=True)
        adv = centred / (rewards.std(1, keepdim=True, correction=0) + 1e-6)
        adv = adv.masked_fill(rewards.amax(1, keepdim=True) == rewards.amin(1, keepdim=True), 0)
        adv = adv.flatten().float()
        tokens = sum(map(len, responses))

        def logps():
            out = []
            for p, q in zip(prompts, responses):
                logits = model(torch.tensor([p + q])).logits[0, len(p) - 1:-1].float()
                out.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(q)[:, None])[:, 0])
            return out

        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.0)
        with torch.no_grad():
            old = logps()
        per_epoch = []
        for _ in range(epochs):
            opt.zero_grad()
            loss, clipped = 0, 0
            for i, logp in enumerate(logps()):
                ratio = torch.exp(logp - old[i])
                unclipped, clip = -adv[i] * ratio, -adv[i] * ratio.clamp(0.8, 1.28)
                loss = loss + torch.maximum(unclipped, clip).sum()
                clipped += (clip > unclipped).sum().item()
            (loss / tokens).backward()
            norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters()))
            per_epoch.append(((loss / tokens).item(), clipped / tokens, norm.item()))
            opt.step()
        return per_epoch

    def test_update_metrics_are_means_over_every_epoch(self):
        # As TRL's PPO and verl report them: each optimizer step's token mean, averaged over the
        # steps (here 3 epochs of one minibatch). The first epoch's ratio is exactly 1 (clip
        # fraction 0): metrics from it alone would not describe the update.
        path = self.rollouts()
        _, cmd = self.job("epochs3", "--rl.ppo_epochs=3", "--rl.learning_rate=3e-3",
                          "--lr_scheduler.warmup_steps=0", "--training.max_norm=1e9",
                          "--rl.old_logprobs=trainer", "--json")
        cmd.insert(1, f"--step_rollouts={path}")
        summary = json.loads(common.run(cmd).stdout)
        per_epoch = self.replay_epochs(common.read_jsonl(path), 3, 3e-3)
        print(f"torch replay per epoch (loss, clip fraction, grad norm): {per_epoch}; titan_rl: "
              f"{summary['loss']:.6g} {summary['clip_fraction']:.6g} {summary['grad_norm']:.6g}")
        mean = [sum(e[k] for e in per_epoch) / 3 for k in range(3)]
        self.assertEqual(summary["optimizer_steps"], 3)
        self.assertGreater(summary["clip_fraction"], 0)
        # 1e-4: fp32 forwards in other kernels, amplified by two AdamW steps at this LR.
        self.assertLess(abs(summary["loss"] - mean[0]), 1e-4 * max(abs(mean[0]), 1e-2))
        self.assertEqual(summary["policy_loss"], summary["loss"])  # no KL, no value loss
        self.assertAlmostEqual(summary["clip_fraction"], mean[1], places=6)
        self.assertLess(abs(summary["grad_norm"] - mean[2]), 1e-4 * mean[2])

    def test_diverged_update_stops_before_its_checkpoint(self):
        # lr 1e30: AdamW moves every weight by about that much, so the next forward overflows.
        dump, cmd = self.job("diverged", "--rl.learning_rate=1e30", "--training.steps=4",
                             "--checkpoint.enable=true", "--checkpoint.interval=1",
                             "--checkpoint.keep_latest_k=0", config="configs/rl_sft_sorting.toml")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        match = re.search(r"step (\d+): loss = \S+, grad_norm = \S+, not finite: the update "
                          r"diverged; stopped before saving it: a checkpoint saved before, if any, "
                          r"is the last good one", proc.stderr)
        self.assertIsNotNone(match, proc.stderr[-3000:])
        diverged = int(match.group(1))
        self.assertGreater(diverged, 1)  # step 1's loss is the initial weights'
        saved = [n for n in os.listdir(os.path.join(dump, "checkpoint")) if n.startswith("step-")]
        self.assertEqual(sorted(int(n.split("-")[1]) for n in saved), list(range(1, diverged)))

    def test_diverged_weights_fail_generation_with_one_clear_error(self):
        # lr x weight_decay = 1e16: step 1's loss and gradient are finite and so are its weights
        # (about 1e16 times the initial ones, saved as step-1), but their logits are not.
        ckpt = ["--checkpoint.enable=true", "--checkpoint.interval=1",
                "--checkpoint.last_save_model_only=false"]
        dump, cmd = self.job("diverged_weights", *ckpt, "--training.steps=3",
                             "--lr_scheduler.warmup_steps=0", "--rl.learning_rate=1e-20",
                             "--optimizer.weight_decay=1e36", "--rl.ppo_epochs=1",
                             "--rl.dynamic_sampling=false")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertIn("titan_rl: step 2: the policy's logits are not finite (NaN or infinite): its "
                      "weights, as step 1's update left them, have diverged (too large, or not "
                      "finite)\n", proc.stderr)
        self.assertNotIn("LibTorch", proc.stderr)
        step_1 = os.path.join(dump, "checkpoint", "step-1")
        # --generate from that step: the same error naming it, greedy or sampled (one generator
        # for the batch, or one per prompt), and as --json's one line.
        output = os.path.join(self.root, "diverged_generated.jsonl")
        for flags in (["--rl.temperature=0"], ["--rl.temperature=1"]):
            _, cmd = self.job("diverged_weights", *ckpt, "--generate", f"--output={output}",
                              "--json", *flags)
            proc = common.run(cmd, check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
            error = (f"the policy's logits are not finite (NaN or infinite): its weights, loaded "
                     f"from {step_1}, have diverged (too large, or not finite)")
            self.assertEqual(json.loads(proc.stdout), {"error": error}, flags)
            self.assertIn(f"titan_rl: {error}\n", proc.stderr)
            self.assertFalse(os.path.exists(output))

    def test_diverged_step_on_rollouts_writes_no_weights(self):
        # 3e38 fits float32 (1e39 is refused as it is read), but PPO's value loss squares it.
        rows = [{"prompt": "Sort: c a b", "response": " #### a b c", "reward": r}
                for r in (3e38, 0, 0, 0)]
        path = os.path.join(self.root, "rollouts_huge.jsonl")
        common.write_jsonl(path, rows)
        dump, cmd = self.job("step_huge", f"--step_rollouts={path}", *self.algorithm("ppo"))
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertRegex(proc.stderr, r"Step: loss = \S+, grad_norm = \S+, not finite: the update "
                         r"diverged")
        self.assertFalse(os.path.exists(os.path.join(dump, "step_weights.safetensors")))
        # Finite loss and gradient norm, but an update past float32 (lr x weight_decay): the
        # weights themselves are checked before they are written.
        rows = [{"prompt": "Sort: c a b", "response": " #### a b c", "reward": r}
                for r in (1, 0, 0, 0)]
        path = os.path.join(self.root, "rollouts_overflow.jsonl")
        common.write_jsonl(path, rows)
        dump, cmd = self.job("step_overflow", f"--step_rollouts={path}", "--rl.ppo_epochs=1",
                             "--rl.learning_rate=3.3e37", "--optimizer.weight_decay=10.3",
                             "--lr_scheduler.warmup_steps=0")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertIn("step_weights.safetensors: the weights are not finite (NaN or inf)",
                      proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(dump, "step_weights.safetensors")))
        # lr x weight_decay itself past float32: one clear error before the update, not an abort.
        _, cmd = self.job("step_lr_overflow", f"--step_rollouts={path}", "--rl.ppo_epochs=1",
                          "--rl.learning_rate=3e37", "--optimizer.weight_decay=20")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertIn("titan_rl: --rl.learning_rate: [rl] learning_rate = 3e+37: lr times "
                      "weight_decay 20 = 6e+38 is past float32's range", proc.stderr)

    def refusal(self, name, *flags):
        """titan_rl's stderr for a job it must refuse with one clear line (no abort)."""
        _, cmd = self.job(name, *flags)
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        return proc.stderr

    def test_a_data_refusal_leaves_no_folder_behind(self):
        # The data is read before the metrics and rollouts files are made: the dump folder the
        # run made is removed again with its lock.
        dump, cmd = self.job("data_refused", f"--rl.eval_prompts_path={self.root}/none.jsonl")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn("[rl] eval_prompts_path", proc.stderr)
        self.assertFalse(os.path.exists(dump), os.listdir(dump) if os.path.isdir(dump) else "")

    def test_ppo_whitening_of_one_response_token_is_refused(self):
        # Bessel's variance of one token is 0/0 (TRL's masked_var raises too): named, not NaN.
        path = os.path.join(self.root, "rollouts_one_token.jsonl")
        common.write_jsonl(path, [{"prompt": "Sort: a", "response": "<|end_of_text|>",
                                   "reward": 1.0}])
        stderr = self.refusal("step_one_token", f"--step_rollouts={path}", *self.algorithm("ppo"),
                              "--rl.group_size=1")
        self.assertIn("PPO advantages over the batch's response tokens: whitening needs at least 2 "
                      "values to estimate a variance (it divides by n - 1, as TRL's masked_var), "
                      "got 1; [rl] whiten_advantages = false trains on such a batch", stderr)
        self.assertNotIn("diverged", stderr)
        _, cmd = self.job("step_one_token_unwhitened", f"--step_rollouts={path}",
                          *self.algorithm("ppo"), "--rl.group_size=1",
                          "--rl.whiten_advantages=false", "--json")
        self.assertTrue(os.path.exists(json.loads(common.run(cmd).stdout)["weights"]))

    def test_non_finite_scorer_rewards_are_refused(self):
        for printed in ("nan", "inf"):
            stderr = self.refusal(f"scorer_{printed}", "--rl.reward=command",
                                  f"--rl.reward_command=sed 's/.*/{printed}/'")
            self.assertIn(f'printed "{printed}" on line 1, expected one finite decimal number per '
                          'line', stderr)
        # Finite in double, infinite in the update's float32.
        stderr = self.refusal("scorer_1e39", "--rl.reward=command",
                              "--rl.reward_command=sed 's/.*/1e39/'")
        self.assertIn('printed "1e39" on line 1, beyond float32\'s range', stderr)

    def test_bad_step_rollouts_name_file_line_and_field(self):
        good = {"prompt": "Sort: b a", "response": "#### a b", "reward": 1}
        for name, bad, error in (("null", "null", '"reward" must be a number, got null'),
                                 ("text", '"high"', '"reward" must be a number, got "high"'),
                                 ("inf", "1e999",
                                  "number overflow parsing '1e999'; write such a number as a string"),
                                 ("float32", "1e39",
                                  '"reward" is 1e+39, beyond float32\'s range')):
            path = os.path.join(self.root, f"rollouts_{name}.jsonl")
            with open(path, "w") as f:
                f.write(json.dumps(good) + "\n" + json.dumps(good)[:-2] + f"{bad}}}\n")
            stderr = self.refusal(f"step_{name}", f"--step_rollouts={path}")
            self.assertIn(f"{path}:2: {error}", stderr)
        path = os.path.join(self.root, "rollouts_empty.jsonl")
        common.write_jsonl(path, [])
        self.assertIn(f"{path}: no rollouts", self.refusal("step_empty", f"--step_rollouts={path}"))

    def test_step_rollouts_longer_than_max_seq_len_are_refused(self):
        # A scored rollout is not cut (its last token carries the reward): the third line (after a
        # blank one) holds more tokens than the config's max_seq_len of 64.
        good = {"prompt": "Sort: b a", "response": " #### a b", "reward": 1}
        long = {**good, "response": " #### a b" * 30}
        path = os.path.join(self.root, "rollouts_long.jsonl")
        with open(path, "w") as f:
            f.write("\n".join(json.dumps(r) for r in (good, {}, long, good, good))
                    .replace("{}", "") + "\n")
        stderr = self.refusal("step_long", f"--step_rollouts={path}")
        self.assertRegex(stderr, re.escape(f"{path}:3: ") + r"\d+ prompt \+ \d+ response tokens "
                         r"exceed \[rl\] max_seq_len = 64: a scored rollout is not cut")

    def test_sft_and_dpo_responses_are_cut_to_max_seq_len(self):
        # TRL's SFTTrainer and DPOTrainer truncate to max_length too: the responses' start is kept,
        # and the step's log counts them. 4 prompts per step, responses of ~120 tokens.
        path = os.path.join(self.root, "long_examples.jsonl")
        common.write_jsonl(path, [{"prompt": f"Sort: c a b {i}", "response": " #### a b c" * 40,
                                   "chosen": " #### a b c" * 40, "rejected": " #### c b a" * 40}
                                  for i in range(16)])
        for algorithm, cut in (("sft", 4), ("dpo", 8)):
            dump, cmd = self.job(f"long_{algorithm}", f"--rl.prompts_path={path}",
                                 "--training.steps=1",
                                 config=f"configs/rl_{algorithm}_sorting.toml")
            proc = common.run(cmd)
            self.assertIn(f"{algorithm} step: {cut} of {cut} responses on this rank cut to fit "
                          "[rl] max_seq_len = 64", proc.stderr)
            if algorithm == "sft":
                step = next(m for m in common.metrics(dump) if m["step"] == 1)
                self.assertLessEqual(step["response_tokens"], 4 * 64)

    def test_json_is_refused_for_training(self):
        self.assertIn("--json: only --generate and --step_rollouts print a JSON summary; a "
                      "training run writes metrics.jsonl under [job] dump_folder",
                      self.refusal("json_train", "--json"))
        self.assertIn("--output names --generate's output file",
                      self.refusal("output_train", "--output=/tmp/never_written.jsonl"))
        self.assertIn("--generate and --step_rollouts: give one of them",
                      self.refusal("generate_step", "--generate", "--step_rollouts=/nonexistent"))

    def test_json_failures_are_one_json_line_on_stdout(self):
        # As checkpoint_inspect's and convert_checkpoint's, and rank 0's alone over several ranks.
        folder = os.path.join(self.root, "json_output_folder")
        os.makedirs(folder, exist_ok=True)
        for ranks in ([], ["--nproc_per_node=2"]):
            _, cmd = self.job(f"json_generate{len(ranks)}", *ranks, "--generate", "--json",
                              f"--output={folder}")
            proc = common.run(cmd, check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
            self.assertEqual(len(proc.stdout.splitlines()), 1, proc.stdout)
            self.assertIn(f"{folder} is a directory: --generate writes one JSONL file",
                          json.loads(proc.stdout)["error"])
        # Refused before any rank starts: the launcher reports it.
        _, cmd = self.job("json_nproc", "--nproc_per_node=0", "--generate", "--json")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn("--nproc_per_node: expected a positive integer",
                      json.loads(proc.stdout)["error"])
        _, cmd = self.job("json_step", "--json", "--step_rollouts=/nonexistent.jsonl")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn("/nonexistent.jsonl", json.loads(proc.stdout)["error"])

    def test_ids_past_the_tokenizer_decode_as_empty_text(self):
        # A model that embeds more ids than its tokenizer has (Qwen3: 151936 rows, 151669 ids)
        # and samples one: the response keeps the id and its text has none, as transformers'
        # generate and the tokenizer's decode give; training goes on.
        hf = os.path.join(self.root, "padded_vocab")
        model = common.save_random_hf(hf, "llama3", vocab_size=2176, initializer_range=0.02)
        prompts = os.path.join(self.root, "padded_prompts.jsonl")
        common.write_jsonl(prompts, [{"prompt": "Sort: b a", "answer": "a b"}])
        output = os.path.join(self.root, "padded_generated.jsonl")
        flags = ["--generate", f"--output={output}", f"--rl.prompts_path={prompts}",
                 "--rl.temperature=0", "--rl.max_new_tokens=4"]
        common.run(common.short_run(TITAN_RL, CONFIG, os.path.join(self.root, "padded_gen"), hf,
                                    *flags))
        prompt_ids = common.read_jsonl(output)[0]["prompt_ids"]
        # Row 2100 of the head along the prompt's last hidden state: the first token is 2100.
        padded = 2100
        with torch.no_grad():
            hidden = model.model(torch.tensor([prompt_ids])).last_hidden_state[0, -1]
            model.lm_head.weight[padded] = hidden / hidden.norm() * 50
        model.save_pretrained(hf)
        common.run(common.short_run(TITAN_RL, CONFIG, os.path.join(self.root, "padded_gen"), hf,
                                    *flags))
        row = common.read_jsonl(output)[0]
        self.assertEqual(row["response_ids"][0], padded)
        tokenizer = transformers.AutoTokenizer.from_pretrained(common.TOKENIZER)
        self.assertEqual(row["response"], tokenizer.decode(row["response_ids"]))
        dump = os.path.join(self.root, "padded_grpo")
        common.run(common.short_run(TITAN_RL, CONFIG, dump, hf, f"--rl.prompts_path={prompts}",
                                    "--training.steps=1", "--rl.prompts_per_step=1"))
        rollouts = common.read_jsonl(os.path.join(dump, "rollouts.jsonl"))
        self.assertEqual({r["response_ids"][0] for r in rollouts}, {padded})
        self.assertEqual([m["step"] for m in common.metrics(dump)], [0, 1])

    def test_generation_stops_at_every_eos_of_generation_config(self):
        # generation_config.json's eos_token_id list (Qwen3's [<|im_end|>, <|endoftext|>]): the
        # response ends at any of them, as transformers' generate(do_sample=False).
        hf = os.path.join(self.root, "eos_list")
        shutil.rmtree(hf, ignore_errors=True)
        shutil.copytree(self.hf, hf)
        prompts = os.path.join(self.root, "eos_prompts.jsonl")
        common.write_jsonl(prompts, [{"prompt": "Sort: b a", "answer": "a b"}])
        output = os.path.join(self.root, "eos_generated.jsonl")
        cmd = common.short_run(TITAN_RL, CONFIG, os.path.join(self.root, "eos_gen"), hf,
                               "--generate", f"--output={output}", f"--rl.prompts_path={prompts}",
                               "--rl.temperature=0", "--rl.max_new_tokens=6")
        common.run(cmd)
        row = common.read_jsonl(output)[0]
        first = row["response_ids"][0]
        self.assertNotEqual(first, common.EOS)
        self.assertFalse(row["stopped"])
        path = os.path.join(hf, "generation_config.json")
        with open(path) as f:
            generation_config = json.load(f)
        generation_config["eos_token_id"] = [common.EOS, first]
        with open(path, "w") as f:
            json.dump(generation_config, f)
        proc = common.run(cmd)
        self.assertIn(f"generation stops at ids [{common.EOS}, {first}] (the model's "
                      "generation_config.json eos_token_id)", proc.stderr)
        row = common.read_jsonl(output)[0]
        self.assertEqual(row["response_ids"], [first])
        self.assertTrue(row["stopped"])
        model = transformers.AutoModelForCausalLM.from_pretrained(hf)
        expected = model.generate(torch.tensor([row["prompt_ids"]]), max_new_tokens=6,
                                  do_sample=False)[0, len(row["prompt_ids"]):].tolist()
        self.assertEqual(row["response_ids"], expected)

    def test_a_generation_config_without_eos_stops_generate_nowhere_and_training_at_eos(self):
        # transformers takes an existing generation_config.json as it is: without eos_token_id its
        # generate runs to max_new_tokens, not to config.json's eos_token_id (here the greedy
        # first token). Training falls back to config.json's: its responses need an end.
        hf = os.path.join(self.root, "eos_none")
        shutil.rmtree(hf, ignore_errors=True)
        shutil.copytree(self.hf, hf)
        prompts = os.path.join(self.root, "eos_none_prompts.jsonl")
        common.write_jsonl(prompts, [{"prompt": "Sort: b a", "answer": "a b"}])
        output = os.path.join(self.root, "eos_none_generated.jsonl")
        cmd = common.short_run(TITAN_RL, CONFIG, os.path.join(self.root, "eos_none_gen"), hf,
                               "--generate", f"--output={output}", f"--rl.prompts_path={prompts}",
                               "--rl.temperature=0", "--rl.max_new_tokens=6")
        common.run(cmd)
        first = common.read_jsonl(output)[0]["response_ids"][0]
        for name, value in (("generation_config.json", None), ("config.json", first)):
            path = os.path.join(hf, name)
            with open(path) as f:
                config = json.load(f)
            config["eos_token_id"] = value
            with open(path, "w") as f:
                json.dump(config, f)
        proc = common.run(cmd)
        self.assertIn("generation stops at no id (the model's generation_config.json names no "
                      "eos_token_id: responses run to max_new_tokens, as transformers' generate)",
                      proc.stderr)
        row = common.read_jsonl(output)[0]
        model = transformers.AutoModelForCausalLM.from_pretrained(hf)
        self.assertIsNone(model.generation_config.eos_token_id)
        expected = model.generate(torch.tensor([row["prompt_ids"]]), max_new_tokens=6,
                                  do_sample=False)[0, len(row["prompt_ids"]):].tolist()
        self.assertEqual(len(expected), 6)
        self.assertEqual(row["response_ids"], expected)
        self.assertFalse(row["stopped"])
        _, train = self.job("eos_none_train", f"--model.hf_assets_path={hf}",
                            f"--checkpoint.initial_load_path={hf}", "--training.steps=1")
        self.assertIn(f"generation stops at ids [{first}] (the model's eos_token_id; its "
                      "generation_config.json names none, and a training run's responses need "
                      "an end)", common.run(train).stderr)

    def test_generate_does_not_overwrite_its_prompts(self):
        prompts = os.path.join(self.root, "own_prompts.jsonl")
        common.write_jsonl(prompts, [{"prompt": "Sort: b a", "answer": "a b"}])
        with open(prompts) as f:
            before = f.read()
        link = os.path.join(self.root, "own_prompts_link.jsonl")
        os.symlink(prompts, link)
        for key in ("prompts_path", "eval_prompts_path"):
            for output in (prompts, link):
                stderr = self.refusal(f"generate_{key}", "--generate", f"--output={output}",
                                      f"--rl.{key}={prompts}")
                self.assertIn(f"--generate would write {output}, which is [rl] {key} = {prompts}",
                              stderr)
        with open(prompts) as f:
            self.assertEqual(f.read(), before)

    def test_prompts_have_one_bos_and_keep_it_when_cut(self):
        # A template that spells the BOS gets one (apply_chat_template adds none of its own); a
        # prompt longer than max_seq_len - max_new_tokens (64 - 1) loses its oldest tokens after
        # the BOS, as transformers' left truncation keeps special tokens.
        prompts = os.path.join(self.root, "bos_prompts.jsonl")
        common.write_jsonl(prompts, [{"prompt": "Sort: b a"},
                                     {"prompt": "Sort: " + " ".join("zyxw" * 30)}])
        ids, stderr = {}, {}
        for name, template, seq in (("plain", "Q: {prompt} A:", 64),
                                    ("spelled", "<|begin_of_text|>Q: {prompt} A:", 64),
                                    ("uncut", "Q: {prompt} A:", 512)):
            output = os.path.join(self.root, f"bos_{name}.jsonl")
            _, cmd = self.job(f"bos_{name}", "--generate", f"--output={output}",
                              f"--rl.prompts_path={prompts}", f"--rl.chat_template={template}",
                              f"--rl.max_seq_len={seq}", "--rl.max_new_tokens=1")
            proc = common.run(cmd)
            ids[name] = [r["prompt_ids"] for r in common.read_jsonl(output)]
            stderr[name] = proc.stderr
        self.assertEqual(ids["spelled"], ids["plain"])
        cut = f"a prompt of {len(ids['uncut'][1])} tokens is cut from the left to 63"
        self.assertIn(cut, stderr["plain"])
        self.assertNotIn("is cut from the left", stderr["uncut"])
        short, long = ids["plain"]
        self.assertEqual(short[:2].count(common.BOS), 1, short)
        self.assertEqual(short, ids["uncut"][0])
        self.assertEqual(len(long), 63)
        self.assertEqual(long[0], common.BOS)
        self.assertEqual(long[1:], ids["uncut"][1][-62:])

    def test_sft_response_ending_with_eos_gets_no_second_one(self):
        # A generation fed back as SFT data ends with the EOS's text: TRL appends none then.
        rows = {}
        for name, response in (("bare", " #### a b"), ("eos", " #### a b<|end_of_text|>")):
            prompts = os.path.join(self.root, f"sft_{name}.jsonl")
            common.write_jsonl(prompts, [{"prompt": "Sort: b a", "response": response}])
            dump, cmd = self.job(f"sft_eos_{name}", f"--rl.prompts_path={prompts}",
                                 "--rl.prompts_per_step=1", "--training.steps=1",
                                 "--metrics.log_freq=1", config="configs/rl_sft_sorting.toml")
            common.run(cmd)
            rows[name] = [m for m in common.metrics(dump) if m["step"] == 1][0]
        for key in ("response_tokens", "loss"):
            self.assertEqual(rows["eos"][key], rows["bare"][key], key)

    def test_an_empty_prompt_without_a_bos_is_refused(self):
        # Qwen's layout (bos_token null): an empty prompt is no token for the response to follow.
        tokenizer = os.path.join(self.root, "no_bos_tokenizer")
        shutil.copytree("assets/default_tokenizer", tokenizer)
        settings = os.path.join(tokenizer, "tokenizer_config.json")
        with open(settings) as f:
            config = json.load(f)
        config["bos_token"] = None
        with open(settings, "w") as f:
            json.dump(config, f)
        prompts = os.path.join(self.root, "empty_prompt.jsonl")
        common.write_jsonl(prompts, [{"prompt": "Sort: b a"}, {"prompt": ""}])
        output = os.path.join(self.root, "empty_prompt_out.jsonl")
        stderr = self.refusal("empty_prompt", "--generate", f"--output={output}",
                              f"--rl.prompts_path={prompts}", f"--model.tokenizer_path={tokenizer}")
        self.assertIn(f"[rl] prompts_path: {prompts}:2: an empty prompt, and the tokenizer has no "
                      "BOS", stderr)
        # So is a given rollout's: --step_rollouts checks the ids its update trains on.
        rollouts = os.path.join(self.root, "empty_prompt_rollouts.jsonl")
        common.write_jsonl(rollouts, [{"prompt": p, "response": " #### a b", "reward": r}
                                      for p in ("Sort: b a", "") for r in (0.0, 1.0)])
        stderr = self.refusal("empty_prompt_step", f"--step_rollouts={rollouts}",
                              "--rl.group_size=2", f"--model.tokenizer_path={tokenizer}")
        self.assertIn(f"{rollouts}:3: an empty prompt, and the tokenizer has no BOS", stderr)
        # With a BOS the response follows it.
        _, cmd = self.job("empty_prompt_bos", "--generate", f"--output={output}",
                          f"--rl.prompts_path={prompts}")
        common.run(cmd)

    def test_generate_reads_prompts_only_whatever_the_algorithm(self):
        prompts = os.path.join(self.root, "prompts_only.jsonl")
        common.write_jsonl(prompts, [{"prompt": "Sort: b a"}, {"prompt": "Sort: c a"}])
        for algorithm in ("sft", "dpo"):
            config = f"configs/rl_{algorithm}_sorting.toml"
            output = os.path.join(self.root, f"prompts_only_{algorithm}.jsonl")
            _, cmd = self.job(f"generate_prompts_only_{algorithm}", "--generate",
                              f"--output={output}", f"--rl.prompts_path={prompts}", config=config)
            common.run(cmd)
            self.assertEqual([r["prompt"] for r in common.read_jsonl(output)],
                             ["Sort: b a", "Sort: c a"])
            # Training still needs the algorithm's targets.
            _, cmd = self.job(f"train_prompts_only_{algorithm}", f"--rl.prompts_path={prompts}",
                              config=config)
            proc = common.run(cmd, check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
            field = "response" if algorithm == "sft" else "chosen"
            self.assertIn(f'[rl] prompts_path: {prompts}:1: no "{field}" field', proc.stderr)

    def test_generate_over_two_ranks_writes_one_file_and_one_summary(self):
        prompts = os.path.join(self.root, "five_prompts.jsonl")
        common.write_jsonl(prompts, [{"prompt": f"Sort: {c} a", "answer": f"a {c}"}
                                     for c in "bcdef"])
        for nproc in (1, 2):
            output = os.path.join(self.root, f"generated_{nproc}", "out.jsonl")
            os.makedirs(os.path.dirname(output), exist_ok=True)
            _, cmd = self.job(f"generate_{nproc}", f"--nproc_per_node={nproc}", "--generate",
                              "--json", f"--output={output}", f"--rl.prompts_path={prompts}",
                              "--rl.temperature=0")
            summary = json.loads(common.run(cmd).stdout)  # one line, no "[rank 0] " prefix
            rows = common.read_jsonl(output)
            self.assertEqual([r["prompt"] for r in rows], [f"Sort: {c} a" for c in "bcdef"])
            self.assertEqual(summary["prompts"], 5)
            self.assertEqual(summary["generated_tokens"], sum(len(r["response_ids"]) for r in rows))
            self.assertEqual(os.listdir(os.path.dirname(output)), ["out.jsonl"])  # no rank parts

    def test_sampled_responses_depend_on_the_prompt_and_its_index_only(self):
        # Each prompt draws from its own generator, seeded by (seed, its index in the file): the
        # same response whatever the ranks or the prompts after it.
        prompts = [{"prompt": f"Sort: {c} a"} for c in "bcdef"] + [{"prompt": "Sort: h g f e d"}]
        outputs = {}
        for name, nproc, count in (("all_1", 1, 6), ("all_2", 2, 6), ("first_3", 1, 3)):
            path = os.path.join(self.root, f"sampled_prompts_{name}.jsonl")
            common.write_jsonl(path, prompts[:count])
            output = os.path.join(self.root, f"sampled_{name}.jsonl")
            _, cmd = self.job(f"sampled_{name}", f"--nproc_per_node={nproc}", "--generate",
                              f"--output={output}", f"--rl.prompts_path={path}",
                              "--rl.temperature=1", "--rl.max_new_tokens=8")
            common.run(cmd)
            outputs[name] = [r["response_ids"] for r in common.read_jsonl(output)]
        self.assertEqual(outputs["all_2"], outputs["all_1"])
        self.assertEqual(outputs["first_3"], outputs["all_1"][:3])
        self.assertGreater(len(set(map(tuple, outputs["all_1"]))), 1)  # sampled, not greedy

    def test_generate_with_seed_minus_one_samples_with_the_seed_it_draws(self):
        # Without a step to read, seed -1 draws a seed and logs it: the same seed given again
        # samples the same responses.
        path = os.path.join(self.root, "drawn_seed_prompts.jsonl")
        common.write_jsonl(path, [{"prompt": f"Sort: {c} a"} for c in "bcdef"])
        outputs = {}
        seed = None
        for name in ("drawn", "given"):
            output = os.path.join(self.root, f"generated_{name}_seed.jsonl")
            _, cmd = self.job(f"generate_{name}_seed", "--generate", f"--output={output}",
                              f"--rl.prompts_path={path}", "--rl.temperature=1",
                              "--rl.max_new_tokens=8",
                              f"--training.seed={seed if seed else -1}")
            stderr = common.run(cmd).stderr
            if seed is None:
                seed = re.search(r"\[training\] seed = -1: drew seed (\d+)", stderr)[1]
            outputs[name] = [r["response_ids"] for r in common.read_jsonl(output)]
        self.assertEqual(outputs["given"], outputs["drawn"])
        self.assertGreater(len(set(map(tuple, outputs["drawn"]))), 1)  # sampled, not greedy

    def test_generate_over_two_ranks_keeps_files_named_like_its_parts(self):
        # The old part names, <output>.rank<r>: here the run's own prompts and a user's file.
        folder = os.path.join(self.root, "generated_beside")
        os.makedirs(folder, exist_ok=True)
        output = os.path.join(folder, "q.jsonl")
        prompts = output + ".rank1"
        common.write_jsonl(prompts, [{"prompt": f"Sort: {c} a", "answer": f"a {c}"} for c in "bcd"])
        with open(output + ".rank2", "w") as f:
            f.write("mine\n")
        with open(prompts) as f:
            before = f.read()
        _, cmd = self.job("generate_beside", "--nproc_per_node=2", "--generate",
                          f"--output={output}", f"--rl.prompts_path={prompts}",
                          "--rl.temperature=0")
        common.run(cmd)
        self.assertEqual([r["prompt"] for r in common.read_jsonl(output)],
                         [f"Sort: {c} a" for c in "bcd"])
        with open(prompts) as f:
            self.assertEqual(f.read(), before)
        self.assertEqual(sorted(os.listdir(folder)), ["q.jsonl", "q.jsonl.rank1", "q.jsonl.rank2"])

    def test_generate_to_a_directory_is_refused(self):
        folder = os.path.join(self.root, "output_folder")
        os.makedirs(folder, exist_ok=True)
        stderr = self.refusal("generate_dir", "--generate", f"--output={folder}")
        self.assertIn(f"{folder} is a directory: --generate writes one JSONL file; pass "
                      "--output=FILE", stderr)
        self.assertNotIn("generated", stderr)
        # A link (to stdout, say) or a device would be replaced by a file: refused too.
        link = os.path.join(self.root, "output_link")
        if not os.path.islink(link):
            os.symlink("/proc/self/fd/1", link)
        stderr = self.refusal("generate_link", "--generate", f"--output={link}")
        self.assertIn(f"{link} is not a regular file (a link, device or FIFO)", stderr)
        self.assertTrue(os.path.islink(link))
        # A missing folder: said by every rank before the model loads, not as "another rank
        # failed to write its part" after the generation.
        missing = os.path.join(self.root, "no_such_folder", "out.jsonl")
        stderr = self.refusal("generate_missing_folder", "--nproc_per_node=2", "--generate",
                              f"--output={missing}")
        self.assertIn(f"--output={missing}: its folder {os.path.dirname(missing)} does not exist",
                      stderr)
        self.assertNotIn("another rank failed", stderr)
        # A file where the folder would be is named as such.
        a_file = os.path.join(self.root, "a_file")
        with open(a_file, "w") as f:
            f.write("mine\n")
        under_a_file = os.path.join(a_file, "out.jsonl")
        stderr = self.refusal("generate_under_a_file", "--generate", f"--output={under_a_file}")
        self.assertIn(f"--output={under_a_file}: its folder {a_file} is not a folder", stderr)

    def test_generate_with_fewer_prompts_than_ranks_is_refused(self):
        prompts = os.path.join(self.root, "two_prompts.jsonl")
        common.write_jsonl(prompts, [{"prompt": f"Sort: {c} a", "answer": f"a {c}"} for c in "bc"])
        for nproc, flags, count in ((3, [f"--rl.prompts_path={prompts}", "--rl.prompts_per_step=6"],
                                     2),
                                    (2, ["--rl.eval_size=1"], 1)):
            stderr = self.refusal(f"generate_few_{nproc}", f"--nproc_per_node={nproc}",
                                  "--generate", *flags)
            self.assertIn(f"--generate: {count} prompts for {nproc} ranks: every rank needs at "
                          "least one", stderr)

    def test_prompts_per_step_splits_over_the_ranks_in_training_runs_only(self):
        # --generate and --step_rollouts split their own inputs over the ranks: prompts_per_step,
        # which only training reads, need not be a multiple of them there.
        output = os.path.join(self.root, "odd_per_step.jsonl")
        _, cmd = self.job("odd_per_step_generate", "--nproc_per_node=2", "--generate",
                          f"--output={output}", "--rl.eval_size=2", "--rl.prompts_per_step=3")
        common.run(cmd)
        self.assertEqual(len(common.read_jsonl(output)), 2)
        _, cmd = self.job("odd_per_step_step", "--nproc_per_node=2", "--json",
                          "--rl.prompts_per_step=3")
        cmd.insert(1, f"--step_rollouts={self.rollouts()}")
        self.assertIn("loss", json.loads(common.run(cmd).stdout))
        stderr = self.refusal("odd_per_step_train", "--nproc_per_node=2",
                              "--rl.prompts_per_step=3")
        self.assertIn("[rl] prompts_per_step = 3 must be a multiple of the data-parallel degree 2",
                      stderr)

    def test_generate_builds_the_policy_alone(self):
        # A reference or a value head is unused by generation: no second copy of the weights.
        output = os.path.join(self.root, "policy_alone.jsonl")
        _, cmd = self.job("policy_alone_generate", *self.algorithm("ppo"), "--rl.kl_coef=0.05",
                          "--generate", f"--output={output}", "--rl.eval_size=2")
        stderr = common.run(cmd).stderr
        self.assertRegex(stderr, r"titan_rl ppo: \d+ training examples, 2 held out; policy .* "
                                 r"parameters\)\n")
        # --step_rollouts' update reads both (the KL to the reference, PPO's values).
        _, cmd = self.job("policy_alone_step", *self.algorithm("ppo"), "--rl.kl_coef=0.05")
        cmd.insert(1, f"--step_rollouts={self.rollouts()}")
        self.assertIn("parameters), frozen reference, value head\n", common.run(cmd).stderr)

    def test_step_rollouts_takes_the_rows_logprobs_as_the_old_ones(self):
        # An external generator's (vLLM's) log-probabilities are the behaviour policy's: with [rl]
        # old_logprobs = "generator" (the default) the update's ratio is taken against them.
        rows = common.read_jsonl(self.rollouts())
        tokenizer = transformers.AutoTokenizer.from_pretrained(common.TOKENIZER)
        lengths = [len(tokenizer(r["response"], add_special_tokens=False)["input_ids"])
                   for r in rows]
        summaries = {}
        for name, logprobs, old in (("none", None, "generator"), ("given", -5.0, "generator"),
                                    ("ignored", -5.0, "trainer")):
            path = os.path.join(self.root, f"rollouts_logprobs_{name}.jsonl")
            common.write_jsonl(path, [dict(r, **({} if logprobs is None else
                                                 {"logprobs": [logprobs] * n}))
                                      for r, n in zip(rows, lengths)])
            _, cmd = self.job(f"step_logprobs_{name}", "--rl.kl_coef=0", "--json",
                              f"--rl.old_logprobs={old}")
            cmd.insert(1, f"--step_rollouts={path}")
            proc = common.run(cmd)
            summaries[name] = json.loads(proc.stdout)
            if name == "ignored":
                self.assertIn(f'{path}: its "logprobs" are not read: [rl] old_logprobs = "trainer"',
                              proc.stderr)
        self.assertEqual(summaries["none"]["logprob_diff_max"], 0.0)  # the trainer's own
        self.assertGreater(summaries["given"]["logprob_diff_max"], 1.0)  # -5 vs the trainer's
        self.assertNotEqual(summaries["given"]["loss"], summaries["none"]["loss"])
        for key in ("loss", "grad_norm", "logprob_diff_max"):
            self.assertEqual(summaries["ignored"][key], summaries["none"][key], key)
        # One per response token, else the row is refused by file:line.
        path = os.path.join(self.root, "rollouts_logprobs_short.jsonl")
        common.write_jsonl(path, [dict(r, logprobs=[-1.0] * (n - (i == 2)))
                                  for i, (r, n) in enumerate(zip(rows, lengths))])
        stderr = self.refusal("step_logprobs_short", f"--step_rollouts={path}")
        self.assertIn(f'{path}:3: {lengths[2] - 1} "logprobs" for a response of {lengths[2]} '
                      "tokens", stderr)

    def test_step_rollouts_trains_on_the_rows_response_ids(self):
        # Sampled ids need not be their text's encoding (a partial UTF-8 token decodes to U+FFFD,
        # BPE splits digits its own way): titan's rollouts.jsonl and --generate rows carry
        # response_ids, which the update trains on. Here each row's ids are its text's plus EOS.
        rows = common.read_jsonl(self.rollouts())
        tokenizer = transformers.AutoTokenizer.from_pretrained(common.TOKENIZER)
        ids = [tokenizer(r["response"], add_special_tokens=False)["input_ids"] + [common.EOS]
               for r in rows]
        summaries = {}
        for name, extra in (("text", lambda i: {}),
                            ("ids", lambda i: {"response_ids": ids[i],
                                               "logprobs": [-1.0] * len(ids[i])})):
            path = os.path.join(self.root, f"rollouts_response_ids_{name}.jsonl")
            common.write_jsonl(path, [dict(r, **extra(i)) for i, r in enumerate(rows)])
            _, cmd = self.job(f"step_response_ids_{name}", "--rl.kl_coef=0", "--json")
            cmd.insert(1, f"--step_rollouts={path}")
            summaries[name] = json.loads(common.run(cmd).stdout)
        self.assertAlmostEqual(summaries["ids"]["response_length"],
                               summaries["text"]["response_length"] + 1, places=6)
        # Ids past the model's vocabulary are refused by file:line.
        path = os.path.join(self.root, "rollouts_response_ids_bad.jsonl")
        common.write_jsonl(path, [dict(r, response_ids=[4096] if i == 1 else ids[i])
                                  for i, r in enumerate(rows)])
        stderr = self.refusal("step_response_ids_bad", f"--step_rollouts={path}")
        self.assertIn(f'{path}:2: "response_ids" holds 4096, past the model\'s vocabulary of',
                      stderr)

    def test_step_rollouts_conditions_on_the_rows_prompt_ids(self):
        # A generator with its own chat template sampled after its own prompt tokens: a row's
        # prompt_ids are what the update conditions on, whatever its prompt text encodes to.
        rows = common.read_jsonl(self.rollouts())
        prompt_ids = {"Sort: c a b": [7, 300, 45, 9], "Sort: h e f": [12, 800, 3]}
        summaries = {}
        for name, row in (("text", lambda r: r),
                          ("ids", lambda r: dict(r, prompt_ids=prompt_ids[r["prompt"]])),
                          ("ids_other_text", lambda r: dict(r, prompt="Other: " + r["prompt"],
                                                            prompt_ids=prompt_ids[r["prompt"]]))):
            path = os.path.join(self.root, f"rollouts_prompt_ids_{name}.jsonl")
            common.write_jsonl(path, [row(r) for r in rows])
            _, cmd = self.job(f"step_prompt_ids_{name}", "--rl.kl_coef=0", "--json")
            cmd.insert(1, f"--step_rollouts={path}")
            summaries[name] = json.loads(common.run(cmd).stdout)
        # The policy's entropy and gradient depend on the prompt (the first step's loss does not).
        for key in ("grad_norm", "entropy"):
            self.assertNotEqual(summaries["ids"][key], summaries["text"][key], key)
        for key in ("loss", "grad_norm", "entropy"):
            self.assertEqual(summaries["ids_other_text"][key], summaries["ids"][key], key)
        # Ids past the model's vocabulary are refused by file:line (a group's rows share theirs).
        path = os.path.join(self.root, "rollouts_prompt_ids_bad.jsonl")
        common.write_jsonl(path, [dict(r, prompt_ids=[1, 4096]) if i < 4 else r
                                  for i, r in enumerate(rows)])
        stderr = self.refusal("step_prompt_ids_bad", f"--step_rollouts={path}")
        self.assertIn(f'{path}:1: "prompt_ids" holds 4096, past the model\'s vocabulary of',
                      stderr)

    def test_logprob_diff_max_covers_every_minibatch(self):
        # Rows 1-4 (the first minibatch) have log-probabilities near a random model's (about
        # -ln 2048 = -7.6), rows 5-8 far above (below would make the ratio overflow): the maximum
        # is over the whole batch, each row's taken before the update.
        rows = common.read_jsonl(self.rollouts())
        tokenizer = transformers.AutoTokenizer.from_pretrained(common.TOKENIZER)
        path = os.path.join(self.root, "rollouts_far_second_half.jsonl")
        common.write_jsonl(path, [
            dict(r, logprobs=[-7.0 if i < 4 else -0.5] *
                 len(tokenizer(r["response"], add_special_tokens=False)["input_ids"]))
            for i, r in enumerate(rows)])
        summaries = {}
        for minibatch in (-1, 4):
            _, cmd = self.job(f"diff_max_{minibatch}", f"--rl.minibatch_size={minibatch}",
                              "--rl.ppo_epochs=2", "--rl.kl_coef=0", "--json")
            cmd.insert(1, f"--step_rollouts={path}")
            summaries[minibatch] = json.loads(common.run(cmd).stdout)
        self.assertEqual(summaries[4]["optimizer_steps"], 4)
        self.assertGreater(summaries[-1]["logprob_diff_max"], 6)
        # The same trainer log-probabilities, from a gradient-free forward: fp32 kernels apart.
        self.assertAlmostEqual(summaries[4]["logprob_diff_max"], summaries[-1]["logprob_diff_max"],
                               places=4)
        # So is the entropy: the policy's before the update, every row's (rows 5-8's measured after
        # the first minibatch's optimizer step were 5.7e-6 off).
        print(f"entropy: one minibatch {summaries[-1]['entropy']:.9g}, "
              f"two {summaries[4]['entropy']:.9g}")
        self.assertAlmostEqual(summaries[4]["entropy"], summaries[-1]["entropy"], places=6)

    def test_a_step_without_an_optimizer_step_logs_its_lr_and_no_updates_metrics(self):
        # Equal rewards: dynamic sampling drops every group of both steps. Each logs its own rate
        # (warmup_steps 2: half the peak, then the peak), though no optimizer step set it, and
        # what was measured, but none of the metrics of the update that did not happen (a 0 loss
        # or the dropped tokens over the update's near-zero time would read as measured).
        dump, cmd = self.job("no_update_lr", "--rl.reward=command",
                             "--rl.reward_command=awk '{print 0}'", "--rl.learning_rate=0.001",
                             "--rl.kl_coef=0.05")
        proc = common.run(cmd)
        rows = [m for m in common.metrics(dump) if m["step"] > 0]
        self.assertEqual([m["optimizer_steps"] for m in rows], [0, 0])
        self.assertEqual([m["lr"] for m in rows], [0.0005, 0.001])
        for m in rows:
            for key in ("reward_mean", "counted_fraction", "generation_tps", "memory_gib"):
                self.assertIn(key, m)
            for key in UPDATE_METRICS + ("training_tps",):
                self.assertNotIn(key, m)
        step_lines = [line for line in proc.stderr.splitlines() if "step:  1" in line]
        self.assertEqual(len(step_lines), 1, proc.stderr[-3000:])
        self.assertNotIn("loss:", step_lines[0])
        self.assertNotIn("tps:", step_lines[0].replace("generation_tps:", ""))

    def test_an_update_that_drops_every_group_reports_no_updates_metrics(self):
        # Dynamic sampling drops groups of equal rewards: with none left nothing is measured, so
        # entropy and logprob_diff_max are left out (0 would read as a deterministic policy), and
        # so are the update's loss, gradient norm and throughput (no optimizer step ran).
        tokenizer = transformers.AutoTokenizer.from_pretrained(common.TOKENIZER)
        rows = [dict(r, reward=1.0, logprobs=[-7.0] * len(
            tokenizer(r["response"], add_special_tokens=False)["input_ids"]))
            for r in common.read_jsonl(self.rollouts())]
        path = os.path.join(self.root, "rollouts_all_equal.jsonl")
        common.write_jsonl(path, rows)
        for minibatch in (-1, 4):
            _, cmd = self.job(f"all_dropped_{minibatch}", f"--rl.minibatch_size={minibatch}",
                              "--json")
            cmd.insert(1, f"--step_rollouts={path}")
            summary = json.loads(common.run(cmd).stdout)
            self.assertEqual(summary["optimizer_steps"], 0)
            self.assertEqual(summary["counted_fraction"], 0)
            self.assertIn("reward_mean", summary)
            for key in UPDATE_METRICS:
                self.assertNotIn(key, summary)

    def test_reward_statistics_past_float32s_range_are_exact(self):
        # Rewards float32 holds whose squares and sums it does not: the statistics are doubles'.
        # A small spread around a large mean: E[x²] - mean² cancels to 0 even in double.
        for name, rewards in (("past_float32", [3e38, 3e38, -3e38, -3e38, 1e38, 0.0, 1e38, 0.0]),
                              ("large_mean", [1e8 + i % 2 for i in range(8)])):
            rows = [dict(r, reward=reward)
                    for r, reward in zip(common.read_jsonl(self.rollouts()), rewards)]
            path = os.path.join(self.root, f"rollouts_{name}.jsonl")
            common.write_jsonl(path, rows)
            _, cmd = self.job(f"step_{name}", f"--step_rollouts={path}", "--json")
            summary = json.loads(common.run(cmd).stdout)
            mean = sum(rewards) / len(rewards)
            std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
            self.assertAlmostEqual(summary["reward_mean"] / mean, 1, places=12, msg=name)
            self.assertAlmostEqual(summary["reward_std"] / std, 1, places=12, msg=name)

    def test_step_rollouts_groups_of_mixed_prompts_are_refused(self):
        # Groups are taken by position: rows 1-4 and 5-8, each of one prompt, else refused.
        rows = common.read_jsonl(self.rollouts())
        rows[3], rows[4] = rows[4], rows[3]
        path = os.path.join(self.root, "rollouts_mixed.jsonl")
        common.write_jsonl(path, rows)
        stderr = self.refusal("step_mixed", f"--step_rollouts={path}")
        self.assertIn(f'{path}:4: prompt "Sort: h e f" is not its group\'s ({path}:1: '
                      '"Sort: c a b"): each run of [rl] group_size = 4 rows is one prompt\'s '
                      "group; keep a prompt's rows together", stderr)
        # PPO has no groups: the same rows are one batch.
        _, cmd = self.job("step_mixed_ppo", f"--step_rollouts={path}", *self.algorithm("ppo"),
                          "--json")
        self.assertIn("weights", json.loads(common.run(cmd).stdout))

    def test_step_rollouts_that_do_not_split_over_the_ranks_are_refused(self):
        for count, message in (
                (12, "12 rollouts over 2 ranks: each rank takes a share of 6, which does not split "
                     "into [rl] group_size = 4 groups (give a multiple of 8)"),
                (7, "7 rollouts for 2 ranks: each rank takes an equal share, so give a multiple "
                    "of 2")):
            path = os.path.join(self.root, f"{count}_rollouts.jsonl")
            common.write_jsonl(path, [{"prompt": "Sort: b a", "response": " #### a b",
                                       "reward": 1}] * count)
            stderr = self.refusal(f"step_{count}", "--nproc_per_node=2", f"--step_rollouts={path}")
            self.assertIn(f"{path}: {message}", stderr)

    def test_step_rollouts_checks_the_algorithm_before_the_rollouts(self):
        # 7 rows split into no group_size = 8 group: the algorithm is what is wrong, said first.
        path = os.path.join(self.root, "rollouts_for_dpo.jsonl")
        common.write_jsonl(path, [{"prompt": "Sort: b a", "response": " #### a b", "reward": 1}] * 7)
        for algorithm in ("sft", "dpo"):
            _, cmd = self.job(f"step_{algorithm}", f"--step_rollouts={path}",
                              config=f"configs/rl_{algorithm}_sorting.toml")
            proc = common.run(cmd, check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
            self.assertIn("--step_rollouts updates on scored rollouts: [rl] algorithm must be grpo, "
                          f"dapo or ppo, not {algorithm}", proc.stderr)
            self.assertNotIn("group_size", proc.stderr)

    def test_tool_flags_take_their_value_as_the_next_argument(self):
        output = os.path.join(self.root, "spaced", "out.jsonl")
        os.makedirs(os.path.dirname(output), exist_ok=True)
        _, cmd = self.job("generate_spaced", "--generate", "--output", output, "--rl.eval_size=2")
        common.run(cmd)
        self.assertEqual(len(common.read_jsonl(output)), 2)
        path = self.rollouts()
        _, cmd = self.job("step_spaced", "--json", "--step_rollouts", path)
        self.assertIn("loss", json.loads(common.run(cmd).stdout))
        proc = common.run([TITAN_RL, "--generate", "--output"], check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--output: missing value (--output=FILE)", proc.stderr)

    def test_json_summary_to_a_full_disk_fails(self):
        # The step is done, but its summary is lost: titan_rl says so, as coreutils do.
        _, cmd = self.job("step_full", "--json", f"--step_rollouts={self.rollouts()}")
        self.assert_summary_lost_to_a_full_disk(cmd)

    def assert_summary_lost_to_a_full_disk(self, cmd):
        """Runs `cmd` with stdout on /dev/full: exit 1, saying the write failed."""
        with open("/dev/full", "w") as full:
            self.assert_summary_lost(cmd, full, "No space left on device")

    def assert_summary_lost(self, cmd, stdout, reason):
        proc = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True,
                              timeout=1800)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertEqual(proc.stderr.splitlines()[-1], f"titan_rl: stdout: write failed: {reason}")

    def test_generate_summary_lost_to_a_full_disk_leaves_no_output(self):
        # As convert_checkpoint --json: exit 1 comes with neither the output nor its summary.
        output = os.path.join(self.root, "generate_full", "out.jsonl")
        os.makedirs(os.path.dirname(output), exist_ok=True)
        _, cmd = self.job("generate_full", "--generate", "--json", f"--output={output}",
                          "--rl.eval_size=2")
        self.assert_summary_lost_to_a_full_disk(cmd)
        self.assertFalse(os.path.exists(output))
        summary = json.loads(common.run(cmd).stdout)  # the rerun succeeds
        self.assertEqual(summary["output"], output)
        self.assertEqual(len(common.read_jsonl(output)), 2)
        # A reader gone loses it too: exit 1 and no output, not the 141 of work done.
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            self.assert_summary_lost(cmd, write_end, "Broken pipe")
        finally:
            os.close(write_end)
        self.assertFalse(os.path.exists(output))

    def test_help_says_beta_and_advantage_eps_must_be_positive(self):
        proc = common.run([TITAN_RL, "--help"], check=False)
        help_text = proc.stdout + proc.stderr
        for key, text in (("beta", "DPO temperature beta, > 0"),
                          ("advantage_eps", "must be > 0 with a std division")):
            entry = help_text[help_text.index(f"--rl.{key} "):]
            entry = entry[:entry.index("\n  --")]
            self.assertIn(text, entry)
            self.assertNotIn("range: >= 0", entry)

    def test_help_says_dapo_leaves_the_overlong_penalty_off(self):
        # dapo defaults clip_range_high and dynamic_sampling only: overlong_buffer_len stays 0.
        proc = common.run([TITAN_RL, "--help"], check=False)
        help_text = proc.stdout + proc.stderr
        entry = help_text[help_text.index("--rl.algorithm "):]
        entry = " ".join(entry[:entry.index("\n  --")].split())
        self.assertIn("dapo (grpo with clip-higher and dynamic sampling on by default; its overlong "
                      "penalty is overlong_buffer_len, off unless set)", entry)
        self.assertNotIn("overlong penalty defaults", entry)

    def stopping_model(self):
        """A model that answers in whole-word tokens (" a" ... " e", the bundled tokenizer's 257,
        262, 283, 277, 267) or stops, their output rows scaled up so that responses often stop and
        re-encode to their ids (a random model's byte tokens decode to U+FFFD): its folder."""
        hf = os.path.join(self.root, "hf_stops")
        if not os.path.isdir(hf):
            model = common.save_random_hf(hf, "llama3", initializer_range=0.02)
            with torch.no_grad():
                model.lm_head.weight[[257, 262, 283, 277, 267, common.EOS]] *= 30
            model.save_pretrained(hf)
        return hf

    # top_k 3: stopping_model's scaled rows.
    STOPPING_RUN = ["--rl.top_k=3", "--rl.reward=command",
                    "--rl.reward_command=awk '{print length($0) % 3}'"]

    def replay_a_step(self, name, *flags, fields=("prompt", "response", "reward")):
        """One step of CONFIG from stopping_model, then --step_rollouts on that step's rows (their
        `fields`) under the same `flags`: the step's metrics, the replay's summary and the rows."""
        hf = self.stopping_model()
        # One step in both (the LR schedule's warmup depends on it).
        flags = [*self.STOPPING_RUN, "--training.steps=1", *flags]
        dump = os.path.join(self.root, f"replayed_{name}")
        common.run(common.short_run(TITAN_RL, CONFIG, dump, hf, *flags))
        step = next(m for m in common.metrics(dump) if m["step"] == 1)
        rows = [r for r in common.read_jsonl(os.path.join(dump, "rollouts.jsonl"))
                if r["step"] == 1]
        path = os.path.join(self.root, f"replayed_{name}_rollouts.jsonl")
        common.write_jsonl(path, [{k: r[k] for k in fields} for r in rows])
        cmd = common.short_run(TITAN_RL, CONFIG, os.path.join(self.root, f"replay_{name}"), hf,
                               *flags, "--json")
        cmd.insert(1, f"--step_rollouts={path}")
        replay = json.loads(common.run(cmd).stdout)
        print(f"{name}: step 1: loss {step['loss']:.9g}, grad norm {step['grad_norm']:.9g}; "
              f"replayed: loss {replay['loss']:.9g}, grad norm {replay['grad_norm']:.9g}")
        return step, replay, rows

    def assert_replayed(self, step, replay):
        for key in ("loss", "grad_norm", "entropy", "response_length", "counted_fraction",
                    "reward_mean"):
            self.assertEqual(replay[key], step[key], key)  # the same ids and kernels: bitwise

    def test_step_rollouts_on_a_runs_rollouts_replays_its_step(self):
        # Old log-probabilities the trainer's in the run as in the replay, the responses as text.
        # Responses past 4 of the 12 tokens lose reward (DAPO's overlong penalty): rollouts.jsonl
        # has the scorer's rewards.
        step, replay, rows = self.replay_a_step("text", "--rl.old_logprobs=trainer",
                                                "--rl.overlong_buffer_len=8")
        self.assertTrue(any(r["response_ids"][-1] == common.EOS for r in rows))
        self.assertTrue(any(len(r["response_ids"]) > 4 for r in rows))
        self.assert_replayed(step, replay)

    def test_step_rollouts_replays_a_step_whose_responses_all_stopped_early(self):
        # Every response stops well before max_new_tokens: the step's batch is as wide as its
        # longest response, not as the generator's, or its sums over it would add up in another
        # order than the replay's. Whole rows (prompt and response ids, the generator's
        # log-probabilities as the old ones) in batch-invariant mode, as a user replays
        # rollouts.jsonl.
        step, replay, rows = self.replay_a_step(
            "stopped", "--rl.max_new_tokens=40", "--debug.batch_invariant=true",
            "--rl.dynamic_sampling=false",
            fields=("prompt", "prompt_ids", "response", "reward", "response_ids", "logprobs"))
        self.assertTrue(all(r["response_ids"][-1] == common.EOS for r in rows))
        self.assertLess(max(len(r["response_ids"]) for r in rows), 40)
        self.assertEqual(step["logprob_diff_max"], 0.0)
        self.assert_replayed(step, replay)

    def test_save_step_after_a_model_only_final_step_says_to_start_a_new_run(self):
        # Raising [training] steps would not help: a model-only step is not trained on from.
        dump, cmd = self.job("save_step_model_only", "--checkpoint.enable=true",
                             "--checkpoint.last_save_model_only=true", "--training.steps=1",
                             "--rl.dynamic_sampling=false")
        common.run(cmd)
        proc = common.run([cmd[0], f"--step_rollouts={self.rollouts()}", "--save_step", *cmd[1:]],
                          check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        step = os.path.join(dump, "checkpoint", "step-1")
        self.assertIn(f"titan_rl: --save_step: {step}, the run's last step, holds model weights "
                      "only (a last_save_model_only export), so no step follows it in this run; to "
                      f"train on from these weights start a new run with [checkpoint] "
                      f"initial_load_path={step} in another [job] dump_folder", proc.stderr)

    def test_step_rollouts_save_step_chains_into_the_training_runs_steps(self):
        # Two --save_step calls on a 2-step run's rollouts, one step's rows each, make the run's
        # steps again: the same metrics and the same step-2 weights, bit for bit.
        flags = ["--rl.old_logprobs=trainer", "--rl.dynamic_sampling=false",
                 "--checkpoint.enable=true", "--checkpoint.interval=1",
                 "--checkpoint.last_save_model_only=false", "--training.steps=2"]
        hf = self.stopping_model()
        trained = os.path.join(self.root, "trained_for_chain")
        common.run(common.short_run(TITAN_RL, CONFIG, trained, hf, *self.STOPPING_RUN, *flags))
        rows = common.read_jsonl(os.path.join(trained, "rollouts.jsonl"))
        chained = os.path.join(self.root, "chained")
        shutil.rmtree(chained, ignore_errors=True)
        summaries = []
        for step in (1, 2):
            path = os.path.join(self.root, f"chain_step{step}.jsonl")
            common.write_jsonl(path, [{k: r[k] for k in ("prompt", "response", "reward",
                                                         "response_ids")}
                                      for r in rows if r["step"] == step])
            cmd = common.short_run(TITAN_RL, CONFIG, chained, hf, *self.STOPPING_RUN, *flags,
                                   "--json", "--save_step", f"--step_rollouts={path}")
            summaries.append(json.loads(common.run(cmd).stdout))
        metrics = {m["step"]: m for m in common.metrics(trained) if "loss" in m}
        for step, summary in zip((1, 2), summaries):
            self.assertEqual(summary["step"], step)
            self.assertEqual(summary["weights"],
                             os.path.join(chained, "checkpoint", f"step-{step}"))
            for key in ("loss", "grad_norm", "entropy", "reward_mean"):
                self.assertEqual(summary[key], metrics[step][key], (step, key))
        self.assertEqual(summaries[1]["weights_from"], summaries[0]["weights"])
        self.assertEqual([m["step"] for m in common.metrics(chained)], [1, 2])
        want = load_file(os.path.join(trained, "checkpoint", "step-2", "model.safetensors"))
        got = load_file(os.path.join(chained, "checkpoint", "step-2", "model.safetensors"))
        self.assertEqual(sorted(want), sorted(got))
        for name in want:
            self.assertTrue(torch.equal(want[name], got[name]), name)
        self.assertFalse(os.path.exists(os.path.join(chained, "step_weights.safetensors")))
        # The run's schedule ends at [training] steps: no third step.
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--save_step: the run is at step 2, its last ([training] steps = 2): raise "
                      "[training] steps to add steps", proc.stderr)
        # A SIGTERM during the update lets it finish and save, as a training step's does.
        proc = subprocess.Popen([*cmd, "--training.steps=4"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        for line in proc.stderr:
            if "SIGINT/SIGTERM now finish the update" in line:
                proc.send_signal(signal.SIGTERM)
                break
        stdout, stderr = proc.communicate(timeout=600)
        self.assertEqual(proc.returncode, 0, stdout)
        self.assertEqual(json.loads(stdout)["step"], 3)
        self.assertTrue(os.path.isdir(os.path.join(chained, "checkpoint", "step-3")))
        # Over 2 ranks (each its share of the rows; rank 0 logs the metrics), the run's last step
        # saved as training's last save: model-only, with its Hugging Face export.
        more = [cmd[0], "--nproc_per_node=2", *cmd[1:], "--training.steps=4",
                "--checkpoint.last_save_model_only=true", "--checkpoint.last_save_in_hf=true"]
        self.assertEqual(json.loads(common.run(more).stdout)["step"], 4)
        self.assertEqual([m["step"] for m in common.metrics(chained)], [1, 2, 3, 4])
        step4 = os.path.join(chained, "checkpoint", "step-4")
        self.assertFalse(any(n.startswith("optimizer") for n in os.listdir(step4)))
        self.assertTrue(os.path.isfile(os.path.join(chained, "checkpoint", "step-4-hf",
                                                    "config.json")))
        proc = common.run([*cmd[:-3], "--checkpoint.enable=false", *cmd[-3:]], check=False)
        self.assertIn("--save_step saves the update as the run's next checkpoint step: set "
                      "[checkpoint] enable = true", proc.stderr)
        proc = common.run([c for c in cmd if not c.startswith("--step_rollouts") and c != "--json"],
                          check=False)
        self.assertIn("--save_step saves --step_rollouts' update as the run's next step; without "
                      "--step_rollouts there is no such update", proc.stderr)
        # With --json too: --save_step's refusal, not --json's (which names no --save_step).
        proc = common.run([c for c in cmd if not c.startswith("--step_rollouts")], check=False)
        self.assertIn("--save_step saves --step_rollouts' update as the run's next step; without "
                      "--step_rollouts there is no such update", json.loads(proc.stdout)["error"])

    def test_overlong_penalty_is_at_most_its_factor(self):
        # Given rollouts may be longer than max_new_tokens: DAPO's soft punishment stops at the
        # factor (1 here) beyond the maximum length, so rewards 1, 1, 0, 0 average -0.5.
        path = os.path.join(self.root, "overlong_rollouts.jsonl")
        common.write_jsonl(path, [{"prompt": "Sort: c a b", "response": " #### a b c d e f g h i j",
                                   "reward": r} for r in (1, 1, 0, 0)])
        _, cmd = self.job("step_overlong", "--rl.max_new_tokens=4", "--rl.overlong_buffer_len=2",
                          "--rl.overlong_penalty_factor=1", "--json")
        cmd.insert(1, f"--step_rollouts={path}")
        summary = json.loads(common.run(cmd).stdout)
        self.assertAlmostEqual(summary["reward_mean"], -0.5, places=6)

    def test_top_k_and_top_p_are_refused_when_greedy(self):
        # Greedy decoding takes the most likely token: no top_k or top_p would change it.
        output = os.path.join(self.root, "greedy_top_k.jsonl")
        stderr = self.refusal("greedy_top_k", "--generate", f"--output={output}",
                              "--rl.temperature=0", "--rl.top_k=3")
        self.assertIn("[rl] top_k = 3: only sampling (temperature > 0) keeps the top_k tokens or "
                      "the top_p nucleus, temperature is 0 (greedy: the most likely token); "
                      "remove it", stderr)
        self.assertFalse(os.path.exists(output))

    def test_prompts_without_answers_are_refused_by_verifiers(self):
        prompts = os.path.join(self.root, "no_answer.jsonl")
        common.write_jsonl(prompts, [{"prompt": "Sort: b a", "answer": "a b"},
                                     {"prompt": "Sort: c a"}])
        stderr = self.refusal("no_answer", f"--rl.prompts_path={prompts}")
        self.assertIn(f'{prompts}:2: no "answer" field; [rl] reward = "exact_match" compares',
                      stderr)

    def test_first_step_checkpoint_and_print_config_act_as_in_titan_train(self):
        # [checkpoint] enable_first_step_checkpoint saves step 1 (PPO: its critic too) besides
        # the interval's steps; [job] print_config logs the configuration run (here [optimizer]
        # lr is [rl] learning_rate's), in training and in --generate.
        dump, cmd = self.job("first_step", *self.algorithm("ppo"), "--checkpoint.enable=true",
                             "--checkpoint.interval=10", "--checkpoint.keep_latest_k=0",
                             "--checkpoint.enable_first_step_checkpoint=true",
                             "--job.print_config=true", "--training.steps=3")
        proc = common.run(cmd)
        for folder in ("checkpoint", "checkpoint_critic"):
            self.assertEqual(sorted(n for n in os.listdir(os.path.join(dump, folder))
                                    if n.startswith("step-")), ["step-1", "step-3"], folder)
        for stderr in (proc.stderr,
                       common.run(cmd + ["--generate"]).stderr):
            config = stderr.split("effective configuration:\n", 1)[1]
            self.assertIn('algorithm = "ppo"\n', config)
            self.assertIn("lr = 2e-04\n", config)

    def test_written_config_runs_again(self):
        # config.toml spells out every key: [rl] minibatch_size = -1 (the whole batch) and the
        # [training] dataset keys at their defaults.
        dump, cmd = self.job("written", "--training.steps=1")
        common.run(cmd)
        again = os.path.join(self.root, "written_again")
        common.run([TITAN_RL, f"--job.config_file={os.path.join(dump, 'config.toml')}",
                    f"--job.dump_folder={again}"], timeout=600)
        self.assertEqual([m["step"] for m in common.metrics(again)], [0, 1])

    def test_contradictions_are_refused(self):
        _, cmd = self.job("refused", "--optimizer.lr=1e-3")
        proc = common.run(cmd, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("[optimizer] lr = 0.001 contradicts [rl] learning_rate", proc.stderr)
        _, cmd = self.job("refused_graph", "--compile.cuda_graph=true")
        proc = common.run(cmd, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("[compile] cuda_graph: titan_rl's batches change shape", proc.stderr)
        # A trainer data key is refused as titan_rl's before titan_train's checks of it, which
        # would ask for a dataset_path (dataset "c4") or another global_batch_size, both refused.
        for flags, refusal in (
                (["--training.dataset=c4"], "titan_rl: --training.dataset: [training] "
                 "dataset: titan_rl reads [rl] prompts_path (or generates [rl] task), not "
                 "[training] dataset/dataset_path/dataset_text_field; remove them"),
                # Whichever is set names its own source.
                (["--training.dataset_text_field=body"],
                 "titan_rl: --training.dataset_text_field: [training] dataset_text_field: "),
                (["--training.global_batch_size=12"],
                 "titan_rl: --training.global_batch_size: [training] global_batch_size = 12: "
                 "titan_rl's batch is [rl] prompts_per_step"),
                (["--validation.enable=true", "--validation.dataset=c4"],
                 "titan_rl evaluates [rl] eval_prompts_path (or the task's held-out split)")):
            stderr = self.refusal("refused_data", *flags)
            self.assertIn(refusal, stderr)
            self.assertNotIn("dataset_path to your copy", stderr)
        # [training] seq_len is [rl] max_seq_len's in titan_rl (and refused there): the key set is
        # named.
        stderr = self.refusal("refused_seq_len", "--rl.max_seq_len=1000000000")
        self.assertIn("[rl] max_seq_len = 1000000000 does not fit in memory", stderr)
        self.assertIn("; lower max_seq_len\n", stderr)
        self.assertNotIn("[training] seq_len", stderr)
        proc = common.run([TITAN_TRAIN, "--rl.algorithm=ppo", "--training.steps=1"], check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("[rl]", proc.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--titan_rl", required=True)
    parser.add_argument("--titan_train", required=True)
    parser.add_argument("--convert_checkpoint", required=True)
    args, rest = parser.parse_known_args()
    TITAN_RL = os.path.abspath(args.titan_rl)
    TITAN_TRAIN = os.path.abspath(args.titan_train)
    CONVERT = os.path.abspath(args.convert_checkpoint)
    unittest.main(argv=[sys.argv[0]] + rest)
