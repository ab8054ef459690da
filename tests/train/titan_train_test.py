"""End-to-end tests of titan_train on the bundled debug model, corpus and tokenizer (CPU).

Run from the Bazel runfiles root, where configs/ and assets/ resolve as in a checkout.
"""
import argparse
import base64
import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import unittest

TITAN_TRAIN = None
CONVERT = None
CONFIG = "configs/llama3_debugmodel.toml"


def run_train(dump, *flags, check=True, config=CONFIG):
    cmd = [TITAN_TRAIN, f"--job.config_file={config}", f"--job.dump_folder={dump}", *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def metrics(dump):
    with open(os.path.join(dump, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def tensorboard_lr(folder):
    """{step: lr} as TensorBoard shows the event files of `folder` (hidden points left out)."""
    from tensorboard.backend.event_processing import event_accumulator
    accumulator = event_accumulator.EventAccumulator(folder)
    accumulator.Reload()
    return {e.step: e.value for e in accumulator.Scalars("lr")}


class TitanTrainTest(unittest.TestCase):
    def setUp(self):
        self.tmp = os.environ.get("TEST_TMPDIR", "/tmp")

    def dump(self, name):
        path = os.path.join(self.tmp, name)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def test_loss_falls_and_outputs_are_written(self):
        dump = self.dump("main")
        run_train(dump, "--training.steps=30")
        rows = metrics(dump)
        self.assertEqual([r["step"] for r in rows], list(range(1, 31)))
        for key in ("step", "loss", "grad_norm", "lr", "tps", "tflops", "memory_gib"):
            self.assertIn(key, rows[0])
        self.assertNotIn("mfu", rows[0])  # no published peak for a CPU
        # The bundled corpus is learnable: 30 steps take off more than 1 nat.
        self.assertLess(rows[-1]["loss"], rows[0]["loss"] - 1.0, [r["loss"] for r in rows])
        # [validation] freq = 10: as torchtitan's should_validate, step 1 and every 10th.
        self.assertEqual([r["step"] for r in rows if "validation_loss" in r], [1, 10, 20, 30])
        self.assertTrue(glob.glob(os.path.join(dump, "tb", "events.out.tfevents.*")))
        self.assertTrue(os.path.isfile(os.path.join(dump, "checkpoint", "step-30", "manifest.json")))
        self.assertTrue(os.path.isfile(os.path.join(dump, "config.toml")))

    def test_resume_from_step_20_reproduces_steps_21_to_40_bitwise(self):
        full = self.dump("full")
        # Its saves reuse one set of host buffers: step 20's must hold step 20's values.
        run_train(full, "--training.steps=40", "--checkpoint.keep_latest_k=0",
                  "--validation.enable=false", "--checkpoint.async_mode=async_with_pinned_mem")
        resumed = self.dump("resumed")
        # A run stopped at step 20 leaves exactly the step-20 checkpoint behind.
        os.makedirs(os.path.join(resumed, "checkpoint"))
        shutil.copytree(os.path.join(full, "checkpoint", "step-20"),
                        os.path.join(resumed, "checkpoint", "step-20"))
        # And the metrics it logged up to step 40, past that checkpoint.
        shutil.copy(os.path.join(full, "metrics.jsonl"), resumed)
        proc = run_train(resumed, "--training.steps=40", "--checkpoint.keep_latest_k=0",
                         "--validation.enable=false")
        self.assertIn("resumed from checkpoint step-20", proc.stderr)
        want = {r["step"]: r["loss"] for r in metrics(full) if r["step"] > 20}
        # One row a step: the rows after the checkpoint were dropped, then logged again.
        self.assertEqual([r["step"] for r in metrics(resumed)], list(range(1, 41)))
        got = {r["step"]: r["loss"] for r in metrics(resumed) if r["step"] > 20}
        # Bitwise: the JSON holds each loss with round-trip precision.
        self.assertEqual(got, want)

        # Rolling back to step 20 sets the later steps aside, so the next resume takes this run's.
        proc = run_train(full, "--training.steps=25", "--checkpoint.load_step=20",
                         "--checkpoint.keep_latest_k=0", "--validation.enable=false")
        # What differs from the run that saved it is said (torchtitan would keep some silently).
        self.assertIn(f"resuming step 20 with keys changed since {full}/checkpoint/step-20 was "
                      "saved: [training] steps = 40 -> 25, [checkpoint] async_mode = "
                      "\"async_with_pinned_mem\" -> \"disabled\", [checkpoint] load_step = -1 -> 20; "
                      "the new values apply", proc.stderr)
        names = sorted(os.listdir(os.path.join(full, "checkpoint")))
        self.assertIn("step-25", names)
        self.assertNotIn("step-40", names)
        self.assertEqual(len([n for n in names if n.startswith("step-40.abandoned-")]), 1, names)
        proc = run_train(full, "--training.steps=26", "--checkpoint.keep_latest_k=0",
                         "--validation.enable=false")
        self.assertIn("resumed from checkpoint step-25", proc.stderr)

    def test_a_resume_names_the_keys_changed_since_the_loaded_steps_run(self):
        # Step 2 is the first run's; the second run (another lr) wrote config.toml last.
        dump = self.dump("changed_keys")
        flags = ["--checkpoint.interval=2", "--checkpoint.keep_latest_k=0",
                 "--validation.enable=false"]
        run_train(dump, "--training.steps=4", *flags)
        run_train(dump, "--training.steps=6", "--optimizer.lr=1e-3", *flags)
        proc = run_train(dump, "--training.steps=5", "--checkpoint.load_step=2", *flags)
        self.assertIn(f"resuming step 2 with keys changed since {dump}/checkpoint/step-2 was saved: "
                      "[training] steps = 4 -> 5, [checkpoint] load_step = -1 -> 2; the new "
                      "values apply", proc.stderr)

    def test_a_resume_with_tensorboard_off_hides_the_redone_steps_points(self):
        dump = self.dump("resume_tb_off")
        flags = ["--checkpoint.interval=2", "--validation.enable=false",
                 "--training.local_batch_size=2", "--training.seq_len=64"]
        run_train(dump, "--training.steps=4", *flags)
        run_train(dump, "--training.steps=4", "--checkpoint.load_step=2",
                  "--metrics.enable_tensorboard=false", "--optimizer.lr=1e-4", *flags)
        time.sleep(1.1)  # event files sort by name, whose time is in seconds
        run_train(dump, "--training.steps=6", "--optimizer.lr=1e-4", *flags)
        lrs = {r["step"]: r["lr"] for r in metrics(dump)}
        shown = tensorboard_lr(os.path.join(dump, "tb"))
        # Steps 3-4 were redone with TensorBoard off: the first run's points are hidden, not shown.
        self.assertEqual(sorted(shown), [1, 2, 5, 6])
        for step, lr in shown.items():
            self.assertAlmostEqual(lr, lrs[step], delta=1e-6 * lrs[step] + 1e-12, msg=step)
        # Only its own: with TensorBoard off, a run leaves another run's folder as it is.
        time.sleep(1.1)
        run_train(self.dump("resume_tb_off_other"), "--training.steps=1",
                  "--metrics.enable_tensorboard=false",
                  f"--metrics.save_tb_folder={os.path.join(dump, 'tb')}", *flags)
        self.assertEqual(sorted(tensorboard_lr(os.path.join(dump, "tb"))), [1, 2, 5, 6])

    def test_the_writer_takes_along_the_metrics_other_ranks_no_longer_write(self):
        dump = self.dump("unwritten_ranks")
        flags = ["--nproc_per_node=2", "--checkpoint.interval=2", "--validation.enable=false",
                 "--training.local_batch_size=2", "--training.seq_len=64"]
        run_train(dump, "--training.steps=4", "--metrics.save_for_all_ranks=true", *flags)
        rank1 = os.path.join(dump, "rank_1")
        self.assertEqual([r["step"] for r in metrics(rank1)], [1, 2, 3, 4])
        time.sleep(1.1)
        run_train(dump, "--training.steps=4", "--checkpoint.load_step=2", "--optimizer.lr=1e-4",
                  *flags)
        self.assertEqual([r["step"] for r in metrics(dump)], [1, 2, 3, 4])
        # Rank 1 wrote nothing this time: its steps after the resumed step 2 go.
        self.assertEqual([r["step"] for r in metrics(rank1)], [1, 2])
        self.assertEqual(sorted(tensorboard_lr(os.path.join(dump, "tb", "rank_1"))), [1, 2])

    def test_counting_from_zero_again_sets_the_loaded_run_aside(self):
        dump = self.dump("restart_count")
        flags = ["--checkpoint.interval=2", "--checkpoint.keep_latest_k=2",
                 "--checkpoint.last_save_model_only=false", "--validation.enable=false"]
        run_train(dump, "--training.steps=6", *flags)
        proc = run_train(dump, "--training.steps=4", "--checkpoint.exclude_from_loading=train_state",
                         *flags)
        self.assertIn("resumed from checkpoint step-6", proc.stderr)
        # This run's saves are kept (keep_latest_k deleted them for the old run's newer steps), and
        # the old run's steps are set aside, not overwritten.
        names = sorted(os.listdir(os.path.join(dump, "checkpoint")))
        self.assertEqual([n for n in names if "." not in n], ["step-2", "step-4"], names)
        self.assertEqual(sorted(n.split(".")[0] for n in names if ".abandoned-" in n),
                         ["step-4", "step-6"], names)
        self.assertEqual([r["step"] for r in metrics(dump)], [1, 2, 3, 4])
        aside = glob.glob(os.path.join(dump, "metrics.jsonl.abandoned-*"))
        self.assertEqual(len(aside), 1, aside)
        with open(aside[0]) as f:
            self.assertEqual([json.loads(line)["step"] for line in f], [1, 2, 3, 4, 5, 6])
        # The same job again (its config.toml, or a retry after a crash) continues this run.
        proc = run_train(dump, "--training.steps=6", "--checkpoint.exclude_from_loading=train_state",
                         *flags)
        self.assertIn("resuming it whole", proc.stderr)
        self.assertEqual([r["step"] for r in metrics(dump)], [1, 2, 3, 4, 5, 6])

    def test_a_restart_that_died_in_its_first_save_leaves_the_loaded_step(self):
        dump = self.dump("restart_died")
        flags = ["--checkpoint.interval=2", "--checkpoint.last_save_model_only=false",
                 "--validation.enable=false"]
        run_train(dump, "--training.steps=2", *flags)
        ckpt = os.path.join(dump, "checkpoint")
        # What a restart killed during its first save leaves: the loaded step set aside, journaled.
        os.rename(os.path.join(ckpt, "step-2"), os.path.join(ckpt, "step-2.abandoned-77"))
        with open(os.path.join(ckpt, ".restart-77.json"), "w") as f:
            json.dump({"run_id": "77", "steps": [2]}, f)
        proc = run_train(dump, "--training.steps=2", "--checkpoint.exclude_from_loading=train_state",
                         *flags)
        self.assertIn("Put back", proc.stderr)
        self.assertIn("resumed from checkpoint step-2", proc.stderr)
        # This restart's own first save committed: its journal is gone, the loaded step aside.
        self.assertEqual(glob.glob(os.path.join(ckpt, ".restart-*.json")), [])
        names = sorted(os.listdir(ckpt))
        self.assertIn("step-2", names)
        self.assertEqual(len([n for n in names if n.startswith("step-2.abandoned-")]), 1, names)

    def test_a_fresh_run_sets_an_earlier_runs_metrics_aside(self):
        dump = self.dump("fresh_twice")
        flags = ["--checkpoint.enable=false", "--validation.enable=false"]
        run_train(dump, "--training.steps=2", *flags)
        run_train(dump, "--training.steps=3", *flags)
        # One row a step, this run's: the earlier run's steps were never saved, so not continued.
        self.assertEqual([r["step"] for r in metrics(dump)], [1, 2, 3])
        aside = glob.glob(os.path.join(dump, "metrics.jsonl.abandoned-*"))
        self.assertEqual(len(aside), 1, aside)
        with open(aside[0]) as f:
            self.assertEqual([json.loads(line)["step"] for line in f], [1, 2])

    def test_a_changed_seq_len_names_the_way_to_resume(self):
        dump = self.dump("seq_len_changed")
        flags = ["--checkpoint.last_save_model_only=false", "--validation.enable=false"]
        run_train(dump, "--training.steps=2", "--checkpoint.interval=2", *flags)
        proc = run_train(dump, "--training.steps=3", "--training.seq_len=64", *flags, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertIn('dataset state: saved with seq_len 128, this run has 64; to read the data '
                      'from its start instead, add [checkpoint] exclude_from_loading = '
                      '["dataloader"]', proc.stderr)
        run_train(dump, "--training.steps=3", "--training.seq_len=64",
                  "--checkpoint.exclude_from_loading=dataloader", *flags)

    def test_another_models_step_is_refused_in_one_line(self):
        dump = self.dump("model_changed")
        flags = ["--checkpoint.last_save_model_only=false", "--validation.enable=false"]
        run_train(dump, "--training.steps=1", *flags)
        proc = run_train(dump, "--training.steps=2", "--model.name=qwen3", *flags, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertRegex(proc.stderr, r"step-1: checkpoint holds llama3 debugmodel \(dim 256.*\), "
                                      r"the model is qwen3 debugmodel \(.*\); first differing "
                                      r"tensors: ")

    def test_a_step_of_another_rope_theta_is_refused(self):
        # Shapes alike, the same weights under another RoPE are another model: a resume of a step
        # saved with other architecture fields (here the manifest's record) is refused by name.
        dump = self.dump("theta_changed")
        flags = ["--checkpoint.last_save_model_only=false", "--validation.enable=false"]
        run_train(dump, "--training.steps=1", *flags)
        manifest = os.path.join(dump, "checkpoint", "step-1", "manifest.json")
        with open(manifest) as f:
            saved = json.load(f)
        saved["state"]["model"]["args"]["rope"]["theta"] = 10000.0
        with open(manifest, "w") as f:
            json.dump(saved, f)
        proc = run_train(dump, "--training.steps=2", *flags, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertRegex(proc.stderr, r"step-1: saved by llama3 \(dim 256.*\), but this "
                                      r"run's model is llama3 debugmodel \(.*\) \(rope_theta 10000 vs "
                                      r"500000\); resume with the saved settings")

    def test_load_step_with_nothing_to_train_changes_nothing(self):
        # A mistyped steps would set the newer steps aside (and drop their metrics) for no run.
        # keep_latest_k deletes nothing either: a run trims only once the step it loaded is its
        # newest, and this one never gets there (more than k steps stay, as saved).
        dump = self.dump("load_step_idle")
        flags = ["--checkpoint.last_save_model_only=false", "--validation.enable=false",
                 "--checkpoint.interval=1"]
        run_train(dump, "--training.steps=4", "--checkpoint.keep_latest_k=0", *flags)
        proc = run_train(dump, "--training.steps=2", "--checkpoint.load_step=2",
                         "--checkpoint.keep_latest_k=2", *flags, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertIn("[checkpoint] load_step = 2 with [training] steps = 2: nothing would train, "
                      "yet the steps after 2 would be set aside", proc.stderr)
        self.assertNotIn("Deleted checkpoint", proc.stderr)
        folder = os.path.join(dump, "checkpoint")
        self.assertEqual(sorted(os.listdir(folder)),
                         [".titan.lock", "step-1", "step-2", "step-3", "step-4"])
        self.assertEqual([m["step"] for m in metrics(dump)], [1, 2, 3, 4])
        # Resumed from its newest step (nothing left to train either), the same folder is trimmed.
        proc = run_train(dump, "--training.steps=4", "--checkpoint.load_step=4",
                         "--checkpoint.keep_latest_k=2", *flags)
        self.assertIn("nothing to train", proc.stderr)
        self.assertEqual(sorted(glob.glob("step-*", root_dir=folder)), ["step-3", "step-4"])

    def start_long_run(self, name, rows, *flags):
        """A 10000-step run in a fresh dump folder, returned once its metrics file holds `rows`."""
        dump = self.dump(name)
        cmd = [TITAN_TRAIN, f"--job.config_file={CONFIG}", f"--job.dump_folder={dump}",
               "--training.steps=10000", "--checkpoint.interval=1000", "--validation.enable=false",
               *flags]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        path = os.path.join(dump, "metrics.jsonl")
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if os.path.exists(path):
                with open(path) as f:
                    if len(f.readlines()) >= rows:
                        break
            time.sleep(0.1)
        return dump, proc

    def assert_stopped_with_a_save(self, dump, proc):
        """The run stopped early, exit 0, its last logged step saved."""
        _, stderr = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 0, stderr[-3000:])
        last = metrics(dump)[-1]["step"]
        self.assertLess(last, 10000)
        self.assertTrue(os.path.isdir(os.path.join(dump, "checkpoint", f"step-{last}")), stderr)

    def test_sigterm_finishes_step_saves_and_exits_zero(self):
        dump, proc = self.start_long_run("sigterm", rows=3)
        # A second run in the same folder (a resubmitted job) is refused while this one runs.
        second = run_train(dump, "--training.steps=10000", "--validation.enable=false",
                           check=False)
        self.assertEqual(second.returncode, 1, second.stderr[-3000:])
        self.assertIn(f"titan_train: --job.dump_folder: [job] dump_folder: {dump} is in use by "
                      f"another run (pid {proc.pid})",
                      second.stderr)
        # So is one that names this run's checkpoint folder as its own.
        ckpt = os.path.join(dump, "checkpoint")
        third = run_train(self.dump("sigterm_other"), f"--checkpoint.folder={ckpt}",
                          "--validation.enable=false", check=False)
        self.assertEqual(third.returncode, 1, third.stderr[-3000:])
        self.assertIn(f"[checkpoint] folder: {ckpt} is in use by another run (pid {proc.pid})",
                      third.stderr)
        # And one that names its TensorBoard folder: their points would interleave in one series.
        tb = os.path.join(dump, "tb")
        fourth = run_train(self.dump("sigterm_tb"), "--metrics.enable_tensorboard=true",
                           f"--metrics.save_tb_folder={tb}", "--validation.enable=false",
                           check=False)
        self.assertEqual(fourth.returncode, 1, fourth.stderr[-3000:])
        self.assertIn(f"[metrics] save_tb_folder: {tb} is in use by another run (pid {proc.pid})",
                      fourth.stderr)
        proc.send_signal(signal.SIGTERM)
        self.assert_stopped_with_a_save(dump, proc)

    def test_sighup_finishes_step_saves_and_exits_zero(self):
        # A closed terminal or ssh session stops the run as SIGTERM does, not by its default kill.
        dump, proc = self.start_long_run("sighup", rows=1)
        proc.send_signal(signal.SIGHUP)
        self.assert_stopped_with_a_save(dump, proc)

    def test_a_second_sigterm_ends_the_run_at_once(self):
        # Steps of seconds: the first signal waits for the step and its save, the second does not.
        dump, proc = self.start_long_run("sigterm_twice", 0, "--training.local_batch_size=16",
                                         "--training.seq_len=1024")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        start = time.time()
        _, stderr = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, -signal.SIGTERM, stderr[-3000:])
        self.assertLess(time.time() - start, 2)
        self.assertEqual(glob.glob(os.path.join(dump, "checkpoint", "step-*[0-9]")), [])

    def test_a_sigterm_during_startup_leaves_no_folder_behind(self):
        # The run locks (and so makes) its folders first; the signal comes while it builds the
        # model and reads the data: it ends at once, as a refused run, leaving no lock-only folder.
        dump = self.dump("sigterm_startup")
        cmd = [TITAN_TRAIN, f"--job.config_file={CONFIG}", f"--job.dump_folder={dump}",
               "--training.steps=10000", "--checkpoint.interval=1000"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lock = os.path.join(dump, "checkpoint", ".titan.lock")
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and not os.path.exists(lock):
            time.sleep(0.005)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, -signal.SIGTERM, stderr[-3000:])
        self.assertFalse(os.path.exists(dump), [os.path.join(root, name)
                                                for root, dirs, files in os.walk(dump)
                                                for name in dirs + files])

    def test_a_checkpoint_folder_that_is_the_dump_folder_is_refused(self):
        dump = self.dump("ckpt_is_dump")
        os.makedirs(dump)
        link = os.path.join(self.tmp, "ckpt_is_dump_link")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(dump, link)
        # No spelling of the dump folder: both locks are the dump folder's, not another run's.
        proc = run_train(dump, "--training.steps=1", "--validation.enable=false",
                         f"--checkpoint.folder={link}", check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        lines = [l for l in proc.stderr.splitlines() if l.startswith("titan_train:")]
        self.assertEqual(lines, [f"titan_train: --checkpoint.folder: [checkpoint] folder: {link} "
                                 "is the folder of [job] dump_folder too; give it a folder of its "
                                 "own"],
                         proc.stderr[-2000:])
        # Spelled as the dump folder, validation refuses it before anything is locked.
        proc = run_train(dump, "--training.steps=1", "--validation.enable=false",
                         "--checkpoint.folder=", check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn('titan_train: [checkpoint] folder = "" is [job] dump_folder itself: '
                      'checkpoints need a folder of their own', proc.stderr)

    def test_a_diverged_step_stops_the_run_before_it_is_saved(self):
        dump = self.dump("diverged")
        # lr 1e6 makes step 2's gradient norm non-finite; step 3 is neither logged nor saved.
        proc = run_train(dump, "--training.steps=6", "--optimizer.lr=1e6",
                         "--lr_scheduler.warmup_steps=1", "--metrics.log_freq=10",
                         "--checkpoint.interval=3", "--checkpoint.enable_first_step_checkpoint",
                         "--validation.enable=false", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("gradient norm was not finite (NaN or inf) at a step in 2..3", proc.stderr)
        self.assertIn("a checkpoint saved before, if any, is the last good one", proc.stderr)
        # Step 1's save is the last good one and is kept; no later step was written.
        self.assertEqual(
            [os.path.basename(p) for p in glob.glob(os.path.join(dump, "checkpoint", "step-*"))],
            ["step-1"])
        # A finite gradient norm whose update overflows (lr x weight_decay past float32): the save
        # checks the weights themselves.
        overflow = self.dump("update_overflow")
        proc = run_train(overflow, "--training.steps=2", "--optimizer.lr=3e37",
                         "--optimizer.weight_decay=10", "--lr_scheduler.warmup_steps=1",
                         "--checkpoint.interval=1", "--validation.enable=false", check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn("titan_train: step 1: the weights are not finite (NaN or inf)", proc.stderr)
        self.assertEqual(glob.glob(os.path.join(overflow, "checkpoint", "step-*")), [])

    def test_bad_config_fails_fast_with_one_line(self):
        dump = self.dump("bad")
        bad_file = os.path.join(self.tmp, "bad.toml")
        with open(CONFIG) as f, open(bad_file, "w") as out:
            out.write(f.read().replace("[training]\n", "[training]\nstepz = 3\n"))
        cases = [
            (["--training.stepz=3"], "--training.stepz: unknown key"),
            ([], "bad.toml:37: [training] stepz: unknown key"),
            (["--training.steps=ten"], "--training.steps: expected integer"),
            (["--training.global_batch_size=12"], "global_batch_size"),
            (['--optimizer.param_groups=[{pattern = "norm", wieght_decay = 0.0}]'],
             "--optimizer.param_groups[0].wieght_decay: unknown key"),
            (["--training.dataset_text_field="], "[training] dataset_text_field: expected the "
             "JSON field holding each document's text"),
            (["--model.converters=float8", "--float8.emulate=true",
              "--float8.filter_fqns=output,nonexistent_layer"],
             '[float8] filter_fqns: "nonexistent_layer" matches no linear layer\'s name'),
            (["--model.converters=float8", "--float8.emulate=true",
              "--float8.filter_fqns=layers,output"],
             "--float8.filter_fqns: [float8] filter_fqns: every linear layer is filtered out"),
            (['--optimizer.param_groups=[{pattern = "no_such_parameter"}]'],
             '[optimizer] param_groups[0].pattern="no_such_parameter" matches no parameter'),
            (["--checkpoint.load_step=7"], "--checkpoint.load_step: [checkpoint] load_step = 7: "),
            # Past float32's range: refused as it is read, not by ATen at the first step.
            (["--optimizer.lr=1e39"], "--optimizer.lr: [optimizer] lr=1e+39 is out of range: "
             "expected >= 0 and a finite value representable as float32"),
        ]
        for flags, message in cases:
            config = bad_file if not flags else CONFIG
            proc = run_train(dump, *flags, check=False, config=config)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            lines = [l for l in proc.stderr.splitlines() if l.startswith("titan_train:")]
            self.assertEqual(len(lines), 1, proc.stderr)
            self.assertIn(message, lines[0])
        # Nothing was trained: no metrics were written.
        self.assertFalse(os.path.exists(os.path.join(dump, "metrics.jsonl")))

    def test_unreadable_paths_name_their_key(self):
        hf = os.path.join(self.tmp, "config_json_only")
        os.makedirs(hf, exist_ok=True)
        with open(os.path.join(hf, "config.json"), "w") as f:
            f.write("{}")
        cases = [
            (["--training.dataset_path="],
             '[training] dataset_path: expected a JSON lines file or a folder of them, got ""'),
            (["--validation.enable", "--validation.dataset_path="],
             '[validation] dataset_path: expected a JSON lines file or a folder of them, got ""'),
            (["--training.dataset_path=/nonexistent.jsonl"],
             "[training] dataset_path: /nonexistent.jsonl: no such file or directory"),
            (["--model.tokenizer_path=/nonexistent"],
             "[model] tokenizer_path: /nonexistent: no such tokenizer file or directory"),
            (["--metrics.enable_tensorboard", "--metrics.save_tb_folder=/dev/null/tb"],
             "[metrics] save_tb_folder: /dev/null/tb: mkdir failed: Not a directory"),
            (["--checkpoint.initial_load_path=/nonexistent"],
             "[checkpoint] initial_load_path: /nonexistent: no such file or directory"),
            # A Hugging Face folder is not read as one unless initial_load_in_hf says so.
            ([f"--checkpoint.initial_load_path={hf}"],
             f"[checkpoint] initial_load_path: {hf} holds a Hugging Face checkpoint, but "
             "[checkpoint] initial_load_in_hf = false reads titan or Meta checkpoints: set it to "
             "true"),
        ]
        for flags, message in cases:
            dump = self.dump("unreadable")
            proc = run_train(dump, "--validation.enable=false", "--checkpoint.enable=false",
                             *flags, check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
            lines = [l for l in proc.stderr.splitlines() if l.startswith("titan_train:")]
            # Named after the flag that set the key (the message's first).
            key = message[1:].split(" ")[:2]
            source = f"--{key[0].rstrip(']')}.{key[1].rstrip(':')}"
            self.assertEqual(lines, [f"titan_train: {source}: {message}"], proc.stderr[-2000:])
            self.assertFalse(os.path.exists(os.path.join(dump, "metrics.jsonl")))

    def test_a_dump_folder_that_is_a_file_names_its_key(self):
        path = os.path.join(self.tmp, "dump_is_a_file")
        with open(path, "w") as f:
            f.write("mine\n")
        proc = run_train(path, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        lines = [l for l in proc.stderr.splitlines() if l.startswith("titan_train:")]
        self.assertEqual(lines,
                         [f"titan_train: --job.dump_folder: [job] dump_folder: {path}: is a file, "
                          "not a folder (mkdir cannot make a folder there)"])
        with open(path) as f:
            self.assertEqual(f.read(), "mine\n")

    def test_written_config_toml_runs_again(self):
        first = self.dump("config_first")
        run_train(first, "--training.steps=1", "--validation.enable=false",
                  "--checkpoint.enable=false")
        # It holds every section, [rl] at its defaults included.
        again = self.dump("config_again")
        run_train(again, config=os.path.join(first, "config.toml"))
        self.assertEqual([r["step"] for r in metrics(again)], [1])
        # An [rl] typo is refused as [rl]'s, not answered with the [rl] key refused next.
        rl_typo = os.path.join(self.tmp, "rl_typo.toml")
        with open(rl_typo, "w") as f:
            f.write("[rl]\ngroup_sizee = 4\n")
        rl_refused = "[rl] is titan_rl's section, which titan_train would ignore"
        refused = [
            (self.dump("rl_changed"), ["--rl.algorithm=ppo"], CONFIG,
             f'titan_train: --rl.algorithm: [rl] algorithm = "ppo": {rl_refused}; leave it at '
             "its defaults or run titan_rl"),
            (self.dump("rl_typo"), [], rl_typo,
             f"titan_train: {rl_typo}:2: [rl] group_sizee: {rl_refused}; remove it or run "
             "titan_rl"),
            (self.dump("rl_typo_flag"), ["--rl.group_sizee=4"], CONFIG,
             f"titan_train: --rl.group_sizee: {rl_refused}; remove it or run titan_rl"),
            (self.dump("config_folder"), [], first,
             f"titan_train: {first}: is a directory, expected a TOML file"),
            ("", [], CONFIG,
             "titan_train: --job.dump_folder: [job] dump_folder: expected a folder"),
        ]
        for dump, flags, config, message in refused:
            proc = run_train(dump, *flags, check=False, config=config)
            self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
            self.assertIn(message, proc.stderr)

    def test_optimizer_implementations_give_the_same_losses(self):
        losses = {}
        for implementation in ("for-loop", "foreach", "fused"):
            dump = self.dump(f"optimizer_{implementation}")
            proc = run_train(dump, "--training.steps=10", "--validation.enable=false",
                             "--checkpoint.enable=false",
                             f"--optimizer.implementation={implementation}")
            self.assertIn(f"optimizer AdamW ({implementation})", proc.stderr)
            if implementation == "fused":
                # On CPU ATen's kernel is the choice, explained rather than reported as an error.
                self.assertIn("optimizer (fused): ATen's _fused_adam(w)_ (titan's multi-tensor "
                              "Adam kernel is for CUDA tensors; the parameters are on cpu)",
                              proc.stderr)
            losses[implementation] = [r["loss"] for r in metrics(dump)]
        # for-loop and foreach run the same ATen kernels per tensor on CPU: identical losses. The
        # fused kernel rounds differently; over 10 steps the losses stay within 1e-6 relative.
        self.assertEqual(losses["foreach"], losses["for-loop"])
        self.assertEqual(len(losses["fused"]), 10)
        for fused, for_loop in zip(losses["fused"], losses["for-loop"]):
            self.assertLessEqual(abs(fused - for_loop), 1e-6 * abs(for_loop), losses)

    def test_from_checkpoint_takes_a_shape_from_config_json_alone(self):
        # A Hugging Face folder with config.json and no weights (what benchmarks/gpu/make_assets.py
        # writes): the shape to train from scratch.
        shape = self.dump("shape_only")
        os.makedirs(shape)
        config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                  "hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 4096,
                  "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False}
        with open(os.path.join(shape, "config.json"), "w") as f:
            json.dump(config, f)
        dump = self.dump("from_shape")
        proc = run_train(dump, "--model.flavor=from_checkpoint", f"--model.hf_assets_path={shape}",
                         "--model.tokenizer_path=assets/default_tokenizer", "--training.steps=2",
                         "--validation.enable=false", "--checkpoint.enable=false")
        self.assertIn("dim 128, 2 layers, 4/2 heads of 32, ffn 256, vocab 4096", proc.stderr)
        # Fresh weights: the first loss is about ln(4096) = 8.3 (observed 8.7: initial logits are
        # not all equal).
        self.assertLess(abs(metrics(dump)[0]["loss"] - 8.318), 1.0)

    def test_fused_loss_follows_the_full_logits_losses(self):
        runs = {}
        for chunk in (0, 100):  # 100 does not divide the 1,024 tokens of a batch
            dump = self.dump(f"loss_chunk_{chunk}")
            run_train(dump, "--training.steps=10", "--validation.freq=5",
                      "--checkpoint.enable=false", f"--training.loss_chunk_size={chunk}")
            runs[chunk] = metrics(dump)
        # fp32; the same math with the logits' rows in chunks and the log-sum-exp per chunk
        # rounds a little differently: within 1e-5 relative over 10 AdamW steps (observed ~1e-7).
        for key in ("loss", "validation_loss"):
            full = [r[key] for r in runs[0] if key in r]
            fused = [r[key] for r in runs[100] if key in r]
            self.assertEqual(len(fused), len(full))
            self.assertGreater(len(full), 1)
            for got, want in zip(fused, full):
                self.assertLessEqual(abs(got - want), 1e-5 * abs(want), (key, full, fused))

    def test_fused_loss_is_refused_where_it_would_change_the_result(self):
        cases = [
            (["--model.converters=float8", "--float8.emulate=true"],
             'float8 converted it; add "output" to [float8] filter_fqns'),
            (["--debug.batch_invariant=true"], "not batch-invariant"),
        ]
        for flags, message in cases:
            dump = self.dump("fused_refused")
            proc = run_train(dump, "--training.loss_chunk_size=64", *flags, check=False)
            self.assertEqual(proc.returncode, 1, proc.stderr)
            self.assertIn(message, proc.stderr)
            self.assertFalse(os.path.exists(os.path.join(dump, "metrics.jsonl")))

    def test_initial_load_from_titan_and_hf_exports_gives_the_same_model(self):
        base = self.dump("initial_base")
        first = run_train(base, "--training.steps=10", "--validation.enable=false",
                          "--checkpoint.last_save_model_only=true",
                          "--checkpoint.last_save_in_hf=true")
        scratch_loss = metrics(base)[0]["loss"]
        hf = os.path.join(self.tmp, "initial_hf")
        shutil.rmtree(hf, ignore_errors=True)
        subprocess.run([CONVERT, "--from=titan", "--to=hf", os.path.join(base, "checkpoint"), hf],
                       check=True, capture_output=True, text=True)
        # last_save_in_hf wrote what convert_checkpoint writes from the final step, byte for byte.
        exported = os.path.join(base, "checkpoint", "step-10-hf")
        self.assertIn("exported Hugging Face weights to", first.stderr)
        for name in ("model.safetensors", "config.json", "generation_config.json"):
            with open(os.path.join(hf, name), "rb") as a, open(os.path.join(exported, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
        # Llama's layout with original/ copied beside the HF files: a folder holding both.
        both = os.path.join(self.tmp, "initial_hf_and_meta")
        shutil.rmtree(both, ignore_errors=True)
        subprocess.run([CONVERT, "--from=titan", "--to=meta", os.path.join(base, "checkpoint"),
                        both], check=True, capture_output=True, text=True)
        for name in os.listdir(hf):
            shutil.copy(os.path.join(hf, name), both)
        holds = (f"{both}: holds both a Hugging Face checkpoint (config.json) and a Meta one "
                 "(params.json, consolidated.00.pth); reading the ")
        losses = {}
        # from_checkpoint with a tokenizer-only hf_assets_path (as torchtitan's jobs often have):
        # the shape is the initial checkpoint's.
        shape = ["--model.flavor=from_checkpoint", "--model.hf_assets_path=assets/default_tokenizer"]
        for name, flags in (("titan", [f"--checkpoint.initial_load_path={base}/checkpoint"]),
                            ("hf", [f"--checkpoint.initial_load_path={hf}",
                                    "--checkpoint.initial_load_in_hf=true"]),
                            ("both_meta", [f"--checkpoint.initial_load_path={both}"]),
                            ("both_hf", [f"--checkpoint.initial_load_path={both}",
                                         "--checkpoint.initial_load_in_hf=true"]),
                            ("titan_shape", [f"--checkpoint.initial_load_path={base}/checkpoint",
                                             *shape]),
                            ("hf_shape", [f"--checkpoint.initial_load_path={hf}",
                                          "--checkpoint.initial_load_in_hf=true", *shape])):
            dump = self.dump(f"initial_run_{name}")
            proc = run_train(dump, "--training.steps=1", "--checkpoint.enable=false",
                             "--validation.enable=false", *flags)
            self.assertIn("initial weights from", proc.stderr)
            if name.startswith("both"):
                # Once, naming the one read and the setting that reads the other.
                warning = holds + ("Meta one ([checkpoint] initial_load_in_hf = true reads the "
                                   "Hugging Face one)" if name == "both_meta" else
                                   "Hugging Face one ([checkpoint] initial_load_in_hf = false "
                                   "reads the Meta one)")
                self.assertEqual(proc.stderr.count(warning), 1, proc.stderr[-3000:])
            losses[name] = metrics(dump)[0]["loss"]
        # fp32 export is an exact permutation: the same weights give the same loss, bit for bit.
        self.assertEqual(losses["titan"], losses["hf"])
        self.assertEqual(losses["both_meta"], losses["titan"])
        self.assertEqual(losses["both_hf"], losses["titan"])
        self.assertEqual(losses["titan_shape"], losses["titan"])
        self.assertEqual(losses["hf_shape"], losses["titan"])
        self.assertLess(losses["titan"], scratch_loss - 1.0, (losses, first.returncode))
        # Without an initial checkpoint there is no shape to read: the missing file is named.
        proc = run_train(self.dump("no_shape"), *shape, "--training.steps=1", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("needs [model] hf_assets_path (a folder with config.json: there is no "
                      "assets/default_tokenizer/config.json) or [checkpoint] initial_load_path",
                      proc.stderr)

    def test_a_resume_takes_its_weights_and_shape_from_the_step_not_the_initial_load(self):
        base = self.dump("resume_initial_base")
        run_train(base, "--training.steps=3", "--validation.enable=false")
        initial = os.path.join(self.tmp, "resume_initial_weights")
        shutil.rmtree(initial, ignore_errors=True)
        shutil.copytree(os.path.join(base, "checkpoint"), initial)
        flags = ["--validation.enable=false", "--checkpoint.interval=2",
                 "--checkpoint.keep_latest_k=0", f"--checkpoint.initial_load_path={initial}",
                 "--model.flavor=from_checkpoint",
                 "--model.hf_assets_path=assets/default_tokenizer"]
        whole = self.dump("resume_initial_whole")
        run_train(whole, "--training.steps=4", *flags)
        resumed = self.dump("resume_initial_resumed")
        shutil.copytree(os.path.join(whole, "checkpoint", "step-2"),
                        os.path.join(resumed, "checkpoint", "step-2"))
        # torchtitan reads initial_load_path only while the checkpoint folder holds no step: the
        # base weights may move once the run has saved.
        shutil.rmtree(initial)
        proc = run_train(resumed, "--training.steps=4", *flags)
        self.assertIn("resumed from checkpoint step-2", proc.stderr)
        self.assertIn("[checkpoint] initial_load_path not read", proc.stderr)
        self.assertEqual([r["loss"] for r in metrics(resumed)],
                         [r["loss"] for r in metrics(whole)][2:])
        # A load_step that is not there is named as such, not as the initial load it replaces.
        proc = run_train(resumed, "--training.steps=4", "--checkpoint.load_step=3", *flags,
                         check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("[checkpoint] load_step = 3: ", proc.stderr)
        self.assertIn("step-3: no such checkpoint", proc.stderr)
        # Without a step to resume it is read, and its absence named.
        proc = run_train(self.dump("resume_initial_none"), "--training.steps=1", *flags,
                         check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn(f"[checkpoint] initial_load_path: {initial}: no such file", proc.stderr)

    def test_qwen3_debugmodel_learns_the_bundled_corpus(self):
        dump = self.dump("qwen3")
        run_train(dump, "--model.name=qwen3", "--model.flavor=debugmodel", "--training.steps=30",
                  "--checkpoint.enable=false", "--validation.enable=false")
        rows = metrics(dump)
        self.assertEqual([r["step"] for r in rows], list(range(1, 31)))
        print(f"\nqwen3 debugmodel: loss {rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f}",
              file=sys.stderr)
        self.assertLess(rows[-1]["loss"], rows[0]["loss"] - 1.0, [r["loss"] for r in rows])

    def test_llama3_8b_job_file_starts_with_op_level_selective_checkpointing(self):
        # The 8B preset as shipped, shrunk to the debug model, bundled tokenizer and corpus.
        dump = self.dump("llama3_8b_job")
        run_train(dump, "--model.flavor=debugmodel", "--model.hf_assets_path=",
                  "--model.tokenizer_path=assets/default_tokenizer",
                  "--training.dataset_path=assets/default_corpus/train.jsonl",
                  "--training.seq_len=128", "--training.local_batch_size=2",
                  "--training.steps=3", "--metrics.log_freq=1", config="configs/llama3_8b.toml")
        self.assertEqual([r["step"] for r in metrics(dump)], [1, 2, 3])
        with open(os.path.join(dump, "config.toml")) as f:
            effective = f.read()
        self.assertIn('selective_ac_option = "op"', effective)
        self.assertIn('mode = "selective"', effective)

    def test_model_only_checkpoint_is_not_resumed_silently(self):
        dump = self.dump("model_only")
        run_train(dump, "--training.steps=2", "--checkpoint.interval=10",
                  "--checkpoint.last_save_model_only=true", "--validation.enable=false")
        proc = run_train(dump, "--training.steps=4", "--validation.enable=false", check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        line = [l for l in proc.stderr.splitlines() if l.startswith("titan_train:")][0]
        self.assertIn("step-2 holds model weights only", line)
        self.assertIn("initial_load_path", line)

    def test_hf_export_copies_the_tokenizer_files_the_run_read(self):
        def export(name, tokenizer):
            dump = self.dump(f"export_tokenizer_{name}")
            proc = run_train(dump, f"--model.tokenizer_path={tokenizer}", "--training.steps=1",
                             "--validation.enable=false", "--checkpoint.last_save_model_only=true",
                             "--checkpoint.last_save_in_hf=true")
            exported = os.path.join(dump, "checkpoint", "step-1-hf")
            weights = {"config.json", "generation_config.json", "model.safetensors"}
            return exported, set(os.listdir(exported)) - weights, proc.stderr

        def assert_same(a, b):
            with open(a, "rb") as f, open(b, "rb") as g:
                self.assertEqual(f.read(), g.read(), (a, b))

        # A tokenizer.json file, of any name, with the files read beside it: as its folder.
        bundled = "assets/default_tokenizer"
        named = os.path.join(self.tmp, "export_tokenizer_named")
        shutil.rmtree(named, ignore_errors=True)
        os.makedirs(named)
        shutil.copy(os.path.join(bundled, "tokenizer.json"), os.path.join(named, "bpe.json"))
        shutil.copy(os.path.join(bundled, "tokenizer_config.json"), named)
        with open(os.path.join(named, "special_tokens_map.json"), "w") as f:
            json.dump({"eos_token": "<|end_of_text|>"}, f)
        bundled_files = {n: os.path.join(bundled, n)
                         for n in ("tokenizer.json", "tokenizer_config.json")}
        for name, tokenizer, want in (
                ("folder", bundled, bundled_files),
                ("file", bundled_files["tokenizer.json"], bundled_files),
                ("named_file", os.path.join(named, "bpe.json"),
                 {"tokenizer.json": os.path.join(named, "bpe.json"),
                  "tokenizer_config.json": os.path.join(named, "tokenizer_config.json"),
                  "special_tokens_map.json": os.path.join(named, "special_tokens_map.json")})):
            exported, files, _ = export(name, tokenizer)
            self.assertEqual(files, set(want), name)
            for n, source in want.items():
                assert_same(source, os.path.join(exported, n))
        # Tiktoken ranks are no folder's tokenizer files: none exported, and the log says why.
        meta = os.path.join(self.tmp, "export_tokenizer_meta")
        shutil.rmtree(meta, ignore_errors=True)
        os.makedirs(os.path.join(meta, "original"))
        ranks = os.path.join(meta, "original", "tokenizer.model")
        with open(ranks, "w") as f:
            f.writelines(f"{base64.b64encode(bytes([i])).decode()} {i}\n" for i in range(256))
        for name, tokenizer, what, refused in (
                ("tiktoken_folder", meta, "keeps its tiktoken ranks in original/tokenizer.model",
                 "for holding none"),
                ("tiktoken_file", ranks, "is a tiktoken rank file", "as not a directory")):
            exported, files, stderr = export(name, tokenizer)
            self.assertEqual(files, set(), name)
            warnings = [l for l in stderr.splitlines() if "holds no tokenizer" in l]
            self.assertEqual(len(warnings), 1, stderr[-3000:])
            self.assertTrue(warnings[0].startswith("W"), warnings)
            self.assertIn(f"{exported} holds no tokenizer: {tokenizer} {what}; an export copies "
                          "only tokenizer files at a folder's top level (tokenizer.json, "
                          f"tokenizer.model, ...), and convert_checkpoint --tokenizer_dir="
                          f"{tokenizer} refuses it {refused}", warnings[0])
        proc = subprocess.run([CONVERT, "--from=titan", "--to=hf", f"--tokenizer_dir={meta}",
                               os.path.dirname(exported), self.dump("convert_meta")],
                              capture_output=True, text=True)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn(f"--tokenizer_dir: {meta}: none of tokenizer.json", proc.stderr)

    def test_a_sequence_too_long_for_memory_is_refused_naming_seq_len(self):
        # Capped at 4 GB of address space: a regression must not take the machine's memory.
        def cap_memory():
            resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

        flags = ["--training.steps=1", "--training.local_batch_size=1",
                 "--validation.enable=false", "--checkpoint.enable=false"]
        cmd = [TITAN_TRAIN, f"--job.config_file={CONFIG}",
               f"--job.dump_folder={self.dump('huge_seq_len')}", *flags]
        proc = subprocess.run(cmd + ["--training.seq_len=2147483647"], capture_output=True,
                              text=True, timeout=120, preexec_fn=cap_memory)
        self.assertNotEqual(proc.returncode, 0)
        self.assertRegex(proc.stderr, r"--training.seq_len: \[training\] seq_len = 2147483647 does "
                         r"not fit in memory: its RoPE tables \(2147483647 positions x 8 "
                         r"frequencies in float64, 4 tables' worth while computed\) and token "
                         r"batch \(local_batch_size 1 x seq_len 2147483647, inputs and labels\) alone "
                         r"take "
                         r"528.0 GiB, and this process has [0-3]\.\d GiB left; lower seq_len")
        # Within the cap but not what the libraries already mapped leave: refused all the same,
        # not by the allocator while the tables are computed.
        proc = subprocess.run(cmd + ["--training.seq_len=10000000"], capture_output=True,
                              text=True, timeout=120, preexec_fn=cap_memory)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("--training.seq_len: [training] seq_len = 10000000 does not fit in memory",
                      proc.stderr)
        # Tables and tokens that fit, activations that do not: the step says what to lower.
        proc = subprocess.run(cmd + ["--training.seq_len=1000000"], capture_output=True,
                              text=True, timeout=120, preexec_fn=cap_memory)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("step 1: out of host memory: ", proc.stderr)
        self.assertIn("(lower [training] local_batch_size or seq_len", proc.stderr)

    def test_zero_steps_without_a_checkpoint_trains_nothing_and_off_features_keys_are_named(self):
        # The job file sets [checkpoint] and [validation] keys; the flags turn those features off.
        # One process: no pipeline parallelism, no FSDP.
        proc = run_train(self.dump("zero_steps"), "--training.steps=0",
                         "--checkpoint.enable=false", "--validation.enable=false",
                         "--parallelism.pipeline_parallel_schedule=GPipe",
                         "--parallelism.fsdp_reshard_after_forward=never")
        self.assertIn("[training] steps = 0: nothing to train", proc.stderr)
        self.assertNotIn("checkpoint is at step", proc.stderr)
        self.assertIn("[checkpoint] enable = false: interval, last_save_model_only, "
                      "keep_latest_k have no effect", proc.stderr)
        self.assertIn("[validation] enable = false: seq_len, steps have no effect", proc.stderr)
        self.assertIn("[parallelism] pipeline_parallel_degree = 1: pipeline_parallel_schedule has "
                      "no effect", proc.stderr)
        self.assertIn("[parallelism] data_parallel_shard_degree × context_parallel_degree = 1 (no "
                      "FSDP): fsdp_reshard_after_forward has no effect", proc.stderr)

    def test_rerunning_a_job_finished_by_a_model_only_save_has_nothing_to_train(self):
        dump = self.dump("model_only_finished")
        flags = ["--training.steps=2", "--checkpoint.interval=10",
                 "--checkpoint.last_save_model_only=true", "--validation.enable=false"]
        run_train(dump, *flags)
        # The same job again (a resubmission): its final save leaves nothing to train.
        proc = run_train(dump, *flags)
        self.assertIn("checkpoint is at step 2 >= [training] steps 2; nothing to train",
                      proc.stderr)
        # A final-save key changed then makes no export, and is not said to apply.
        proc = run_train(dump, *flags, "--checkpoint.last_save_in_hf=true")
        self.assertIn(f"resuming step 2 with keys changed since {dump}/checkpoint/step-2 was saved: "
                      "[checkpoint] last_save_in_hf = false -> true; nothing is left to train "
                      "([training] steps = 2), so no step is trained and no final save or export "
                      f"is written ({dump}/checkpoint/step-2 stays as saved", proc.stderr)
        self.assertNotIn("the new values apply", proc.stderr)
        self.assertIn("nothing to train", proc.stderr)
        self.assertNotIn("step-2-hf", os.listdir(os.path.join(dump, "checkpoint")))
        self.assertEqual([r["step"] for r in metrics(dump)], [1, 2])

    def test_a_rerun_trims_steps_and_temporaries_that_crashes_left(self):
        # What kill -9 between a save's commit and its cleanup leaves (k + 1 steps, one more per
        # crash), and mid-write of the atomically written files (their .tmp.<pid>).
        dump = self.dump("crash_leftovers")
        flags = ["--training.steps=3", "--checkpoint.interval=1", "--validation.enable=false",
                 "--checkpoint.async_mode=disabled"]
        run_train(dump, *flags, "--checkpoint.keep_latest_k=0")
        folder = os.path.join(dump, "checkpoint")
        self.assertEqual(sorted(n for n in os.listdir(folder) if n.startswith("step-")),
                         ["step-1", "step-2", "step-3"])
        leftovers = ["config.toml.tmp.999999", "metrics.jsonl.tmp.999998",
                     "rank_1/metrics.jsonl.tmp.999997"]
        os.makedirs(os.path.join(dump, "rank_1"))
        for name in leftovers + ["notes.tmp.5"]:
            open(os.path.join(dump, name), "w").close()
        # The same job: nothing left to train, yet keep_latest_k and the cleanup apply.
        proc = run_train(dump, *flags, "--checkpoint.keep_latest_k=2")
        self.assertIn("nothing to train", proc.stderr)
        self.assertEqual(sorted(n for n in os.listdir(folder) if n.startswith("step-")),
                         ["step-2", "step-3"])
        self.assertIn(f"Deleted checkpoint {folder}/step-1 (keep_latest_k=2)", proc.stderr)
        for name in leftovers:
            self.assertFalse(os.path.exists(os.path.join(dump, name)), name)
        self.assertIn(f"Removing {dump}/config.toml.tmp.999999 left by an interrupted write of "
                      f"{dump}/config.toml", proc.stderr)
        self.assertTrue(os.path.exists(os.path.join(dump, "notes.tmp.5")))  # not the run's
        self.assertEqual([r["step"] for r in metrics(dump)], [1, 2, 3])

    def test_a_restart_with_nothing_to_train_trims_the_steps_it_loaded(self):
        # train_state excluded, the loaded run's steps wait for the new run's first save to set
        # them aside; with nothing to train none comes, they stay the folder's steps, and the
        # start-of-run trim applies to them as on any rerun.
        dump = self.dump("restart_nothing_to_train")
        flags = ["--checkpoint.interval=1", "--validation.enable=false",
                 "--checkpoint.async_mode=disabled"]
        run_train(dump, "--training.steps=3", "--checkpoint.keep_latest_k=0", *flags)
        folder = os.path.join(dump, "checkpoint")
        proc = run_train(dump, "--training.steps=0", "--checkpoint.keep_latest_k=2",
                         "--checkpoint.exclude_from_loading=train_state", *flags)
        self.assertIn("[training] steps = 0: nothing to train", proc.stderr)
        self.assertIn(f"Deleted checkpoint {folder}/step-1 (keep_latest_k=2)", proc.stderr)
        # Deleted, not set aside: nothing else is left.
        self.assertEqual(sorted(n for n in os.listdir(folder) if n.startswith("step-")),
                         ["step-2", "step-3"])

    def test_a_failed_final_save_leaves_no_export_without_its_step(self):
        # The final save fails after its export is written, as on a full disk: a file where
        # step-N is to go (made once the run is training, far from its last step) refuses it.
        dump = self.dump("failed_final_save")
        steps = 50
        cmd = [TITAN_TRAIN, f"--job.config_file={CONFIG}", f"--job.dump_folder={dump}",
               f"--training.steps={steps}", "--checkpoint.interval=1000",
               "--checkpoint.last_save_model_only=true", "--checkpoint.last_save_in_hf=true",
               "--validation.enable=false"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        path = os.path.join(dump, "metrics.jsonl")
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None and not (
                os.path.exists(path) and os.path.getsize(path) > 0):
            time.sleep(0.1)
        blocker = os.path.join(dump, "checkpoint", f"step-{steps}")
        with open(blocker, "w"):
            pass
        _, stderr = proc.communicate(timeout=600)
        self.assertEqual(proc.returncode, 1, stderr[-3000:])
        self.assertIn(f"{blocker} is named as a checkpoint step but is not a folder", stderr)
        self.assertEqual(sorted(os.listdir(os.path.join(dump, "checkpoint"))),
                         [".titan.lock", f"step-{steps}"])

    def test_unsupported_key_is_refused_not_ignored(self):
        proc = run_train(self.dump("unsupported"), "--compile.enable=true", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("titan_train: --compile.enable: [compile] enable = true: titan has no "
                      "graph compiler",
                      proc.stderr)

    def test_bad_training_data_is_refused_at_startup_leaving_no_folder(self):
        # Found by reading the first batch before the outputs are made, not at step 1.
        dump = self.dump("bad_text_field")
        proc = run_train(dump, "--training.dataset_text_field=nope", "--validation.enable=false",
                         check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("[training] dataset_path: assets/default_corpus/train.jsonl:1: missing text "
                      "field \"nope\"", proc.stderr.splitlines()[-1])
        self.assertFalse(os.path.exists(dump))

    def test_cuda_graph_is_refused_where_it_cannot_run(self):
        dump = self.dump("cuda_graph")
        proc = run_train(dump, "--compile.cuda_graph=true", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("titan_train: --compile.cuda_graph: [compile] cuda_graph = true needs a "
                      "CUDA device; this run is on cpu", proc.stderr)
        # Refused once the run held its folders: the folders it made are gone again.
        self.assertFalse(os.path.exists(dump))
        os.makedirs(dump)
        proc = run_train(dump, "--compile.cuda_graph=true", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(os.listdir(dump), [".titan.lock"])  # the user's folder stays
        # The last refusal before the first step, [profiling]'s, comes before any metrics file.
        proc = run_train(dump, "--profiling.enable_memory_snapshot=true", check=False)
        self.assertIn("[profiling] enable_memory_snapshot: needs a CUDA device", proc.stderr)
        self.assertEqual(os.listdir(dump), [".titan.lock"])

    def test_no_job_given_is_refused_before_any_work(self):
        # A bare command (or one with only --nproc_per_node) would train the default 10,000-step
        # job into ./outputs.
        cwd = os.path.join(self.tmp, "bare")
        os.makedirs(cwd, exist_ok=True)
        for args in ([], ["--nproc_per_node=2"], ["--nproc_per_node", "1"]):
            proc = subprocess.run([TITAN_TRAIN, *args], capture_output=True, text=True, cwd=cwd,
                                  timeout=60)
            self.assertEqual(proc.returncode, 1, args)
            self.assertIn("titan_train: no job given: pass --job.config_file=FILE", proc.stderr)
            self.assertEqual(os.listdir(cwd), [], args)

    def test_help_lists_every_section(self):
        proc = subprocess.run([TITAN_TRAIN, "--help"], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0)
        for key in ("--training.steps", "--checkpoint.keep_latest_k", "--lr_scheduler.decay_type",
                    "--activation_checkpoint.mode", "--metrics.log_freq"):
            self.assertIn(key, proc.stdout)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--titan_train", required=True)
    parser.add_argument("--convert_checkpoint", required=True)
    args, rest = parser.parse_known_args()
    TITAN_TRAIN = os.path.abspath(args.titan_train)
    CONVERT = os.path.abspath(args.convert_checkpoint)
    unittest.main(argv=[sys.argv[0], "-v", *rest])
