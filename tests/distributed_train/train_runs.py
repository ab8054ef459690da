"""titan_train runs for the multi-process tests: one job on N local ranks, its losses, and the
per-rank state memory it logged. Run from the Bazel runfiles root, where configs/ and assets/
resolve as in a checkout."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

TITAN_TRAIN = None  # set by the test's main from --titan_train
CONFIG = "configs/llama3_debugmodel.toml"
GLOBAL_BATCH = 8
SEQ_LEN = 64
STEPS = 10
# fp32 parity with one process: ranks add partial sums in another order than one process's
# batched reductions (collectives, split matmuls, merged attention blocks), which changes float32
# roundings, and ten AdamW steps carry them forward; observed differences are about 1e-6.
RTOL = 1e-5
# The gradient norm, before clipping, against one process's: sharded ranks add squared norms of
# shards where one process (torch's clip_grad_norm_ in float32) takes each whole tensor's norm,
# observed up to ~1e-4 apart at step 1 (the sharded sums are the nearer to float64's). Loss parity
# alone would miss a gradient of the wrong scale (AdamW's update is scale-free); this would not.
GRAD_NORM_RTOL = 1e-3
COMMON = [
    f"--job.config_file={CONFIG}",
    f"--training.seq_len={SEQ_LEN}",
    f"--training.global_batch_size={GLOBAL_BATCH}",
    "--validation.enable=false",
    "--metrics.enable_tensorboard=false",
    "--comm.train_timeout_seconds=30",
]


def train(dump, nproc, local_batch, *flags, steps=STEPS, check=True, timeout=300):
    cmd = [TITAN_TRAIN]
    if nproc > 1:
        cmd.append(f"--nproc_per_node={nproc}")
    cmd += [*COMMON, f"--job.dump_folder={dump}", f"--training.steps={steps}",
            f"--training.local_batch_size={local_batch}", *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def losses(dump, key="loss"):
    """Step -> `key` (loss, validation_loss, ...) from the run's metrics.jsonl."""
    with open(os.path.join(dump, "metrics.jsonl")) as f:
        return {row["step"]: row[key] for row in map(json.loads, f) if key in row}


def max_rel_diff(want, got):
    return max(abs(got[s] - want[s]) / abs(want[s]) for s in want)


def state_bytes(stderr):
    """Rank -> parameter + optimizer bytes, from the trainer's log line after step 1."""
    found = re.findall(r"rank (\d+) state memory: parameters \d+ B \+ optimizer \d+ B = (\d+) B",
                       stderr)
    return {int(rank): int(total) for rank, total in found}


def device_tokens_per_step(stderr):
    """The median over logged steps 2.. of tps x the time since the previous step's log line:
    the tokens the run credited each device with per step."""
    lines = re.findall(r"I\d{8} (\d\d):(\d\d):([\d.]+) .*\] step: +(\d+) .* tps: ([\d,]+) ",
                       stderr)
    credited, last = [], None
    for hours, minutes, seconds, step, tps in lines:
        at = int(hours) * 3600 + int(minutes) * 60 + float(seconds)
        if last is not None and int(step) == last[0] + 1:
            credited.append(int(tps.replace(",", "")) * (at - last[1]))
        last = (int(step), at)
    return sorted(credited)[len(credited) // 2]


def fresh(root, name):
    path = os.path.join(root, name)
    shutil.rmtree(path, ignore_errors=True)
    return path


def data_parallel_degree(nproc, flags):
    """The ranks that read different data: nproc over the tensor, context and pipeline parallel
    degrees."""
    others = 1
    for flag in flags:
        found = re.fullmatch(r"--parallelism\.(tensor|context|pipeline)_parallel_degree=(\d+)",
                             flag)
        if found:
            others *= int(found.group(2))
    return nproc // others


class ParityTest(unittest.TestCase):
    """Runs against one process's losses (llama3 debug model, 10 steps), saved resumes, and the
    files a distributed checkpoint holds."""
    tmp = None
    reference_flags = ()  # what else the reference run sets (validation: it trains alike)
    reference = None  # one process: step -> loss
    reference_validation = None  # step -> validation loss, with validation in reference_flags
    reference_grad_norm = None  # step -> gradient norm
    reference_bytes = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = os.environ.get("TEST_TMPDIR", "/tmp")
        dump = cls.fresh(f"one_{cls.__name__}")
        proc = train(dump, 1, GLOBAL_BATCH, "--checkpoint.enable=false", *cls.reference_flags)
        cls.reference = losses(dump)
        cls.reference_validation = losses(dump, "validation_loss")
        cls.reference_grad_norm = losses(dump, "grad_norm")
        cls.reference_bytes = state_bytes(proc.stderr)[0]

    @classmethod
    def fresh(cls, name):
        return fresh(cls.tmp, name)

    def check_parity(self, name, nproc, *flags, checkpoint=False, local_batch=None, steps=STEPS,
                     reference=None):
        """Trains `steps` steps (saving every STEPS // 2 with `checkpoint`); each must match one
        process's run of as many steps (the learning-rate schedule depends on the total), or
        `reference`'s losses. The global batch is split over the data-parallel ranks."""
        dump = self.fresh(name)
        ckpt = (["--checkpoint.enable=true", f"--checkpoint.interval={STEPS // 2}",
                 "--checkpoint.keep_latest_k=0", "--checkpoint.last_save_model_only=false"]
                if checkpoint else ["--checkpoint.enable=false"])
        local_batch = local_batch or GLOBAL_BATCH // data_parallel_degree(nproc, flags)
        proc = train(dump, nproc, local_batch, *ckpt, *flags, steps=steps)
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
        if reference is self.reference:
            grad_norm = losses(dump, "grad_norm")
            self.assertEqual(sorted(grad_norm), sorted(self.reference_grad_norm))
            diff = max_rel_diff(self.reference_grad_norm, grad_norm)
            print(f"{name}: max relative grad_norm difference vs 1 process: {diff:.3e}",
                  file=sys.stderr)
            self.assertLessEqual(diff, GRAD_NORM_RTOL, (self.reference_grad_norm, grad_norm))
        validation = losses(dump, "validation_loss")
        if validation and reference is self.reference:
            self.assertEqual(sorted(validation), sorted(self.reference_validation))
            diff = max_rel_diff(self.reference_validation, validation)
            print(f"{name}: max relative validation loss difference vs 1 process: {diff:.3e}",
                  file=sys.stderr)
            self.assertLessEqual(diff, RTOL)
        # tps is per device: the job's tokens of a step over its devices, whatever the layout
        # (tensor- and pipeline-parallel ranks share tokens). Within 40%: log lines' timestamps.
        credited = device_tokens_per_step(proc.stderr) / (GLOBAL_BATCH * SEQ_LEN / nproc)
        print(f"{name}: tokens credited per device per step / its share: {credited:.2f}",
              file=sys.stderr)
        self.assertGreater(credited, 0.6)
        self.assertLess(credited, 1.4)
        # One rank writes metrics (rank 0, or the last pipeline stage's first): one line per step.
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
            proc = train(resumed, nproc, GLOBAL_BATCH // data_parallel_degree(nproc, flags),
                         "--checkpoint.enable=true",
                         "--checkpoint.interval=100", "--checkpoint.keep_latest_k=0", *flags,
                         steps=steps)
            self.assertIn(f"resumed from checkpoint {step_name}", proc.stderr)
            got = losses(resumed)
            self.assertEqual(sorted(got), list(range(saved_step + 1, steps + 1)))
            diff = max_rel_diff({s: original[s] for s in got}, got)
            print(f"\n{name}: max relative loss difference vs the saving run: {diff:.3e}",
                  file=sys.stderr)
            self.assertLessEqual(diff, RTOL)

    def assert_rank_files(self, step_dir, writers, world):
        """Each writing rank saved its own shard files; the manifest records their offsets."""
        names = set(os.listdir(step_dir))
        for stem in ("model", "optimizer"):
            want = {f"{stem}-{r:05d}-of-{world:05d}.safetensors" for r in writers}
            self.assertEqual({n for n in names if n.startswith(stem + "-")}, want)
        with open(os.path.join(step_dir, "manifest.json")) as f:
            manifest = json.load(f)
        pieces = [t for t in manifest["tensors"] if t["name"] == "layers.0.attention.wq.weight"]
        self.assertEqual(len(pieces), len(writers))
        rows = pieces[0]["global_shape"][0]
        self.assertEqual(sorted(p["offsets"][0] for p in pieces),
                         [i * rows // len(writers) for i in range(len(writers))])


def main():
    """Runs the calling module's tests with --titan_train=PATH."""
    global TITAN_TRAIN
    parser = argparse.ArgumentParser()
    parser.add_argument("--titan_train", required=True)
    args, rest = parser.parse_known_args()
    TITAN_TRAIN = os.path.abspath(args.titan_train)
    unittest.main(module="__main__", argv=[sys.argv[0], "-v", *rest])
