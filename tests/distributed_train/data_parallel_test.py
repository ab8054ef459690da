"""titan_train on several local ranks (CPU, Gloo on loopback) against one process.

Parity: every data-parallel layout trains the debug model on the same global batch (8 sequences of
64 tokens per step: 8 x 1 process, 4 x 2 ranks, 2 x 4 ranks) from the same initial weights, so each
step's loss must match one process's within train_runs.RTOL (1e-5 relative, fp32; why: there).
Validation batches split the same way: 2 ranks of 4 windows give one process's validation loss
over 8, within VALIDATION_RTOL (1e-6).

Run from the Bazel runfiles root, where configs/ and assets/ resolve as in a checkout.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import train_runs
from train_runs import COMMON, GLOBAL_BATCH, RTOL, STEPS, losses, max_rel_diff, state_bytes, train

# Validation at the initial weights: ranks sum the same tokens' losses in another order (float32
# within a batch, float64 across batches and ranks); observed differences are below 1e-7.
VALIDATION_RTOL = 1e-6


class DataParallelTest(train_runs.ParityTest):
    def test_fsdp2(self):
        self.check_parity("fsdp2", 2)

    def test_fsdp2_fused_loss_with_the_root_resharded(self):
        # The fused loss reads the gathered head weight inside the forward, before the root group
        # frees it (reshard after forward "always"), and its gradient reaches the shards.
        self.check_parity("fsdp2_fused_loss", 2, "--parallelism.fsdp_reshard_after_forward=always",
                          "--training.loss_chunk_size=48")

    def test_fsdp4_shards_state_and_its_checkpoint_reshards(self):
        # 20 steps (parity with one process's 20), saved every 5.
        dump, proc = self.check_parity("fsdp4", 4, checkpoint=True, steps=2 * STEPS)
        per_rank = state_bytes(proc.stderr)
        print(f"\nparameters + optimizer state per rank: 1 process {self.reference_bytes} B, "
              f"FSDP 4 {per_rank} B", file=sys.stderr)
        self.assertEqual(sorted(per_rank), [0, 1, 2, 3])
        for total in per_rank.values():
            # A quarter, plus at most one padding row per parameter.
            self.assertLess(total, self.reference_bytes / 4 * 1.05)
        # Step 10 of the FSDP-4 run, resumed to step 20 by 2 FSDP ranks, 2 DDP ranks and one
        # process, continues the uninterrupted run.
        step_dir = os.path.join(dump, "checkpoint", f"step-{STEPS}")
        self.assert_rank_files(step_dir, writers=range(4), world=4)
        self.check_resumes(step_dir, [
            ("resume_fsdp2", 2),
            ("resume_ddp2", 2, "--parallelism.data_parallel_replicate_degree=2",
             "--parallelism.data_parallel_shard_degree=1"),
            ("resume_one", 1)], steps=2 * STEPS)

    def test_ddp2_with_gradient_accumulation(self):
        # 2 microbatches of 2 per rank: gradients are all-reduced after the second only.
        self.check_parity("ddp2", 2, "--parallelism.data_parallel_replicate_degree=2",
                          "--parallelism.data_parallel_shard_degree=1", local_batch=2)

    def test_hsdp_2x2_with_async_checkpoints(self):
        dump, proc = self.check_parity("hsdp2x2", 4, "--parallelism.data_parallel_replicate_degree=2",
                                       "--parallelism.data_parallel_shard_degree=2",
                                       "--checkpoint.async_mode=async", checkpoint=True)
        # The first replica's two shard ranks write; the other replica holds the same values.
        step_dir = os.path.join(dump, "checkpoint", "step-5")
        self.assert_rank_files(step_dir, writers=range(2), world=4)
        self.assertTrue(os.path.isdir(os.path.join(dump, "checkpoint", "step-10")))
        self.check_resumes(step_dir, [("resume_hsdp_one", 1)], steps=STEPS)

    def test_killed_rank_stops_the_job_and_the_last_checkpoint_loads(self):
        dump = self.fresh("killed")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        # Ranks started as torchrun would (no titan launcher to stop the survivors).
        ranks = []
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                       LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            cmd = [train_runs.TITAN_TRAIN, *COMMON, f"--job.dump_folder={dump}",
                   "--training.steps=100000",
                   f"--training.local_batch_size={GLOBAL_BATCH // 2}", "--checkpoint.enable=true",
                   "--checkpoint.interval=2", "--checkpoint.keep_latest_k=0",
                   "--comm.train_timeout_seconds=20"]
            ranks.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True))
        metrics_path = os.path.join(dump, "metrics.jsonl")
        deadline = time.time() + 180
        while time.time() < deadline and all(r.poll() is None for r in ranks):
            if os.path.exists(metrics_path):
                with open(metrics_path) as f:
                    if len(f.readlines()) >= 5:
                        break
            time.sleep(0.1)
        ranks[1].send_signal(signal.SIGKILL)
        killed_at = time.time()
        try:
            _, stderr = ranks[0].communicate(timeout=60)
        except subprocess.TimeoutExpired:
            ranks[0].kill()
            self.fail("rank 0 still running 60 s after rank 1 was killed")
        ranks[1].communicate()
        print(f"\nrank 0 exited {ranks[0].returncode} {time.time() - killed_at:.1f} s after rank 1 "
              "was killed", file=sys.stderr)
        self.assertNotEqual(ranks[0].returncode, 0, stderr[-3000:])
        self.assertIn("titan_train:", stderr)
        steps = sorted(int(d.split("-")[1]) for d in os.listdir(os.path.join(dump, "checkpoint"))
                       if re.fullmatch(r"step-\d+", d))
        self.assertTrue(steps, "no committed checkpoint")
        # The newest committed step loads (here into one process) and training goes on from it.
        proc = train(dump, 1, GLOBAL_BATCH, "--checkpoint.enable=true",
                     "--checkpoint.interval=1000", "--checkpoint.keep_latest_k=0",
                     steps=steps[-1] + 1)
        self.assertIn(f"resumed from checkpoint step-{steps[-1]}", proc.stderr)

    def test_qwen3_fsdp2_and_ddp2_match_one_process(self):
        qwen = ["--model.name=qwen3", "--model.flavor=debugmodel", "--checkpoint.enable=false"]
        one = self.fresh("qwen3_one")
        train(one, 1, GLOBAL_BATCH, *qwen)
        reference = losses(one)
        for name, flags in (("qwen3_fsdp2", []),
                            ("qwen3_ddp2", ["--parallelism.data_parallel_replicate_degree=2",
                                            "--parallelism.data_parallel_shard_degree=1"])):
            dump = self.fresh(name)
            train(dump, 2, GLOBAL_BATCH // 2, *qwen, *flags)
            got = losses(dump)
            self.assertEqual(sorted(got), list(range(1, STEPS + 1)))
            diff = max_rel_diff(reference, got)
            print(f"\n{name}: max relative loss difference vs 1 process: {diff:.3e}",
                  file=sys.stderr)
            self.assertLessEqual(diff, RTOL, (reference, got))

    def test_validation_splits_its_batches_across_ranks_like_one_process(self):
        # Each data-parallel rank evaluates its half of every global validation batch (2 x 4
        # windows against one process's 8), so the loss is one process's. With lr 0 the weights
        # stay at their shared initialisation: only the order of float sums differs.
        fixed = ["--optimizer.lr=0", "--checkpoint.enable=false", "--validation.enable=true",
                 "--validation.seq_len=64"]
        # The first 8 documents pack into 17 windows: the last global batch holds one, rank 0's,
        # so rank 1 runs a batch that counts no token while rank 0's FSDP gathers go on.
        tail = os.path.join(self.tmp, "validation_17_windows.jsonl")
        with open("assets/default_corpus/validation.jsonl") as src, open(tail, "w") as dst:
            dst.writelines(src.readlines()[:8])
        ddp = ["--parallelism.data_parallel_replicate_degree=2",
               "--parallelism.data_parallel_shard_degree=1"]
        # (name, validation flags, parallelism flags, what rank 1 logs about its short share)
        for name, validation, parallelism, short_share in (
                # 2 of the default set's 51 batches: no share runs out.
                ("ddp2", ["--validation.steps=2"], ddp, []),
                ("fsdp2", ["--validation.steps=-1", f"--validation.dataset_path={tail}"], [],
                 ["rank 1: its share of the validation set holds 2 of the 3 batches"])):
            one = self.fresh(f"validation_one_{name}")
            train(one, 1, GLOBAL_BATCH, *fixed, *validation, "--validation.local_batch_size=8",
                  steps=1)
            dump = self.fresh(f"validation_{name}")
            proc = train(dump, 2, GLOBAL_BATCH // 2, *fixed, *validation, *parallelism,
                         "--validation.local_batch_size=4", steps=1)
            want, got = losses(one, "validation_loss"), losses(dump, "validation_loss")
            self.assertEqual(sorted(got), [1])
            diff = max_rel_diff(want, got)
            print(f"\n{name} validation loss: relative difference vs 1 process {diff:.3e}",
                  file=sys.stderr)
            self.assertLessEqual(diff, VALIDATION_RTOL)
            self.assertEqual(re.findall(r"rank \d+: its share of the validation set holds "
                                        r"\d+ of the \d+ batches", proc.stderr), short_share)

    def test_bad_degrees_fail_on_every_rank_with_one_line(self):
        proc = train(self.fresh("bad"), 2, 4, "--parallelism.data_parallel_shard_degree=3",
                     check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("data_parallel_shard_degree=3", proc.stderr)


if __name__ == "__main__":
    train_runs.main()
