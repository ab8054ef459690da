"""What the multi-rank titan_train tests share: running titan_train (one process, or
--nproc_per_node ranks on loopback) on the debug model with a fixed global batch, and comparing each
step's loss with one process's.

Parity: every layout trains on the same global batch (8 sequences of 64 tokens per step) from the
same initial weights, so each step's loss must match one process's. Tolerance: 1e-5 relative, fp32:
ranks add partial sums (gradient reductions, microbatch gradients, the loss average) in another
order than one process's batched ones, which changes float32 roundings, and ten AdamW steps carry
them forward.

Run from the Bazel runfiles root, where configs/ and assets/ resolve as in a checkout.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

TITAN_TRAIN = None
CONFIG = "configs/llama3_debugmodel.toml"
GLOBAL_BATCH = 8
STEPS = 10
RTOL = 1e-5
COMMON = [
    f"--job.config_file={CONFIG}",
    "--training.seq_len=64",
    f"--training.global_batch_size={GLOBAL_BATCH}",
    "--validation.enable=false",
    "--metrics.enable_tensorboard=false",
    "--comm.train_timeout_seconds=30",
]


def train(dump, nproc, local_batch, *flags, steps=STEPS, check=True):
    cmd = [TITAN_TRAIN]
    if nproc > 1:
        cmd.append(f"--nproc_per_node={nproc}")
    cmd += [*COMMON, f"--job.dump_folder={dump}", f"--training.steps={steps}",
            f"--training.local_batch_size={local_batch}", *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def local_batch_for(nproc, flags):
    """Sequences per rank for the global batch: the ranks divided among pipeline stages share it."""
    pp = 1
    for flag in flags:
        if flag.startswith("--parallelism.pipeline_parallel_degree="):
            pp = int(flag.split("=")[1])
    return GLOBAL_BATCH // (nproc // pp)


def losses(dump, key="loss"):
    with open(os.path.join(dump, "metrics.jsonl")) as f:
        return {row["step"]: row[key] for row in map(json.loads, f) if key in row}


def max_rel_diff(want, got):
    return max(abs(got[s] - want[s]) / abs(want[s]) for s in want)


def state_bytes(stderr):
    """Rank -> parameter + optimizer bytes, from the trainer's log line after step 1."""
    found = re.findall(r"rank (\d+) state memory: parameters \d+ B \+ optimizer \d+ B = (\d+) B",
                       stderr)
    return {int(rank): int(total) for rank, total in found}


class ParityTestCase(unittest.TestCase):
    """Compares runs against one process's run of the debug model (run once per test class)."""
    tmp = None
    reference_flags = ()  # what else the reference run sets (validation: it trains alike)
    reference = None  # one process: step -> loss
    reference_validation = None  # step -> validation loss, with validation in reference_flags
    reference_bytes = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = os.environ.get("TEST_TMPDIR", "/tmp")
        dump = cls.fresh(f"one_{cls.__name__}")
        proc = train(dump, 1, GLOBAL_BATCH, "--checkpoint.enable=false", *cls.reference_flags)
        cls.reference = losses(dump)
        cls.reference_validation = losses(dump, "validation_loss")
        cls.reference_bytes = state_bytes(proc.stderr)[0]

    @classmethod
    def fresh(cls, name):
        path = os.path.join(cls.tmp, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def check_parity(self, name, nproc, *flags, checkpoint=False, local_batch=None, steps=STEPS,
                     reference=None):
        """Trains `steps` steps (saving every STEPS // 2 with `checkpoint`); each must match one
        process's run of as many steps (the learning-rate schedule depends on the total), or
        `reference`'s losses."""
        dump = self.fresh(name)
        ckpt = (["--checkpoint.enable=true", f"--checkpoint.interval={STEPS // 2}",
                 "--checkpoint.keep_latest_k=0", "--checkpoint.last_save_model_only=false"]
                if checkpoint else ["--checkpoint.enable=false"])
        proc = train(dump, nproc, local_batch or local_batch_for(nproc, flags), *ckpt, *flags,
                     steps=steps)
        got = losses(dump)
        self.assertEqual(sorted(got), list(range(1, steps + 1)))
        if reference is None and steps == STEPS:
            reference = self.reference
        elif reference is None:
            one = self.fresh(f"one_{steps}")
            train(one, 1, GLOBAL_BATCH, "--checkpoint.enable=false", steps=steps)
            reference = losses(one)
        diff = max_rel_diff(reference, got)
        print(f"\n{name}: max relative loss difference vs 1 process over {steps} steps: {diff:.3e}",
              file=sys.stderr)
        self.assertLessEqual(diff, RTOL, (reference, got))
        validation = losses(dump, "validation_loss")
        if validation and reference is self.reference:
            self.assertEqual(sorted(validation), sorted(self.reference_validation))
            diff = max_rel_diff(self.reference_validation, validation)
            print(f"{name}: max relative validation loss difference vs 1 process: {diff:.3e}",
                  file=sys.stderr)
            self.assertLessEqual(diff, RTOL)
        # One rank writes metrics: one line per step, not one per rank.
        with open(os.path.join(dump, "metrics.jsonl")) as f:
            self.assertEqual(len(f.readlines()), steps)
        return dump, proc

    def check_resumes(self, step_dir, runs, steps):
        """Each (name, nproc, flags) run resumes from step_dir and continues its run's losses up
        to `steps`."""
        original = losses(os.path.dirname(os.path.dirname(step_dir)))
        step_name = os.path.basename(step_dir)
        saved_step = int(step_name.split("-")[1])
        for name, nproc, *flags in runs:
            resumed = self.fresh(name)
            shutil.copytree(step_dir, os.path.join(resumed, "checkpoint", step_name))
            proc = train(resumed, nproc, local_batch_for(nproc, flags), "--checkpoint.enable=true",
                         "--checkpoint.interval=100", "--checkpoint.keep_latest_k=0", *flags,
                         steps=steps)
            self.assertIn(f"resumed from checkpoint {step_name}", proc.stderr)
            got = losses(resumed)
            self.assertEqual(sorted(got), list(range(saved_step + 1, steps + 1)))
            diff = max_rel_diff({s: original[s] for s in got}, got)
            print(f"\n{name}: max relative loss difference vs the saving run: {diff:.3e}",
                  file=sys.stderr)
            self.assertLessEqual(diff, RTOL)


def main():
    """Runs the calling module's tests with --titan_train=PATH."""
    global TITAN_TRAIN
    parser = argparse.ArgumentParser()
    parser.add_argument("--titan_train", required=True)
    args, rest = parser.parse_known_args()
    TITAN_TRAIN = os.path.abspath(args.titan_train)
    unittest.main(module="__main__", argv=[sys.argv[0], "-v", *rest])
