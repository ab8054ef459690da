"""profile_run end to end on the debug model (CPU, Gloo on loopback), and titan_train's [profiling].

profile_run, 1 process and FSDP over 2 ranks, 2 warmup + 3 traced steps: every trace must parse as
JSON, hold aten::mm events and one ProfilerStep# range per traced step with forward / backward /
optimizer inside (and comm: ranges under FSDP); the op table must match what this test recomputes
from the trace itself (self and total time per op to 1e-6 ms, the JSON's own rounding; FLOPs exactly,
with torch.utils.flop_counter's formulas on each event's input shapes); the top ops must hold at
least 80% of step time; summary.json must give the step time, its split (which must add up), and
the peak by category, whose parameter, gradient and optimizer-state bytes must equal the tensor
sizes the trainer logs (exact: the tracker counts allocator requests, the trainer tensor nbytes).
The traces folder must be what HolisticTraceAnalysis's TraceAnalysis(trace_dir=<out>/traces) loads:
each of its files a trace with its own integer distributedInfo.rank, and nothing else there.
titan_train with enable_profiling must write a trace at each multiple of profile_freq holding that
step, and nothing with profiling off.

Run from the Bazel runfiles root, where configs/ and assets/ resolve as in a checkout.
"""
import argparse
import collections
import fcntl
import gzip
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tomllib
import unittest
import xml.etree.ElementTree as ElementTree

from torch.utils import flop_counter

PROFILE_RUN = None
TITAN_TRAIN = None
CONFIG = "configs/llama3_debugmodel.toml"
# The debug model's job as it is (sequences of 128 tokens): small batches cost per-op overhead that
# would make the share of the top ops a property of the batch size.
COMMON = [
    f"--job.config_file={CONFIG}",
    "--validation.enable=false",
    "--metrics.enable_tensorboard=false",
    "--comm.train_timeout_seconds=60",
]
WARMUP, ACTIVE = 2, 3
PROFILING_DEFAULTS = {"enable_profiling": False, "save_traces_folder": "profile_traces",
                      "profile_freq": 10, "enable_memory_snapshot": False,
                      "save_memory_snapshot_folder": "memory_snapshot", "profiler_active": 1,
                      "profiler_warmup": 3}
CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations", "communication",
              "other"]


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def profile(out, nproc, *flags, config=CONFIG):
    shutil.rmtree(out, ignore_errors=True)
    cmd = [PROFILE_RUN]
    if nproc > 1:
        cmd.append(f"--nproc_per_node={nproc}")
    common = [f"--job.config_file={config}" if f == COMMON[0] else f for f in COMMON]
    cmd += [*common, f"--out={out}", f"--profile.warmup={WARMUP}", f"--profile.active={ACTIVE}",
            *flags]
    return run(cmd)


def state_bytes(stderr):
    """Rank -> (parameter bytes, optimizer bytes), from the trainer's log line."""
    found = re.findall(r"rank (\d+) state memory: parameters (\d+) B \+ optimizer (\d+) B", stderr)
    return {int(rank): (int(params), int(optimizer)) for rank, params, optimizer in found}


def traces(out):
    """The folder the README points HolisticTraceAnalysis at."""
    return os.path.join(out, "traces")


def load_trace(path):
    with open(path) as f:
        return json.load(f)["traceEvents"]


def op_table_from_trace(events):
    """(name, where) -> [calls, self µs, total µs, flops] over the events inside ProfilerStep#
    ranges, nesting by timestamps per thread (how torch.profiler attributes self time); where is
    the step's thread or another one (no GPU here)."""
    complete = [e for e in events if e.get("ph") == "X"]
    markers = [e for e in complete if e["name"].startswith("ProfilerStep#")]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in markers]
    step_thread = (markers[0]["pid"], markers[0]["tid"])
    by_thread = collections.defaultdict(list)
    for e in complete:
        by_thread[(e["pid"], e["tid"])].append(e)
    self_us = {}
    detached = set()  # ranges outliving the one they started in: asynchronous, beside the step
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_events = []
        for e in thread_events:
            self_us[id(e)] = e["dur"]
            while open_events and (open_events[-1]["ts"] + open_events[-1]["dur"]
                                   <= e["ts"] + 1e-3):
                open_events.pop()
            if open_events and (e["ts"] + e["dur"]
                                > open_events[-1]["ts"] + open_events[-1]["dur"] + 1e-3):
                detached.add(id(e))
                continue
            if open_events:
                self_us[id(open_events[-1])] -= e["dur"]
            open_events.append(e)
    table = collections.defaultdict(lambda: [0, 0.0, 0.0, 0])
    for e in complete:
        if e["name"].startswith("ProfilerStep#"):
            continue
        if not any(b - 1e-3 <= e["ts"] <= end for b, end in steps):
            continue
        on_step = (e["pid"], e["tid"]) == step_thread and id(e) not in detached
        where = "step thread" if on_step else "other thread"
        row = table[(e["name"], where)]
        row[0] += 1
        row[1] += self_us[id(e)]
        row[2] += e["dur"]
        row[3] += reference_flops(e["name"], e.get("args", {}).get("Input Dims"))
    return table


def reference_flops(name, dims):
    """torch.utils.flop_counter's count for the ops profile_run knows, else 0."""
    if dims is None:
        return 0
    if name == "aten::mm":
        return flop_counter.mm_flop(dims[0], dims[1])
    if name == "aten::addmm":
        return flop_counter.addmm_flop(dims[0], dims[1], dims[2])
    if name == "aten::bmm":
        return flop_counter.bmm_flop(dims[0], dims[1])
    if name == "aten::baddbmm":
        return flop_counter.baddbmm_flop(dims[0], dims[1], dims[2])
    if name.startswith("aten::_scaled_dot_product_"):
        if name.endswith("_backward"):
            return flop_counter.sdpa_backward_flop_count(dims[0], dims[1], dims[2], dims[3])
        return flop_counter.sdpa_flop_count(dims[0], dims[1], dims[2])
    return 0


class ProfileRunTest(unittest.TestCase):
    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = os.environ.get("TEST_TMPDIR", "/tmp")

    def check_rank(self, out, rank, summary, logged, world):
        events = load_trace(os.path.join(traces(out), f"trace_rank{rank}.json"))
        names = collections.Counter(e["name"] for e in events if e.get("ph") == "X")
        self.assertGreater(names["aten::mm"], 0)
        markers = sorted(e for e in names if e.startswith("ProfilerStep#"))
        self.assertEqual(markers, [f"ProfilerStep#{s}" for s in range(WARMUP + 1,
                                                                      WARMUP + ACTIVE + 1)])
        for phase in ("forward", "backward", "optimizer"):
            self.assertEqual(names[phase], ACTIVE, phase)
        if world > 1:
            self.assertGreater(names["comm:all_gather"], 0)
            self.assertGreater(names["comm:reduce_scatter:wait"], 0)
            self.assertGreater(names["fsdp::all_gather"], 0)

        # The op table against this test's own reading of the trace.
        with open(os.path.join(out, f"ops_rank{rank}.json")) as f:
            table = {(row["name"], row["where"]): row for row in json.load(f)}
        reference = op_table_from_trace(events)
        self.assertEqual(set(table), set(reference))
        for name, (calls, self_us, total_us, flops) in reference.items():
            row = table[name]
            self.assertEqual(row["calls"], calls, name)
            self.assertAlmostEqual(row["self_ms"], self_us / 1000, delta=1e-6, msg=name)
            self.assertAlmostEqual(row["total_ms"], total_us / 1000, delta=1e-6, msg=name)
            self.assertEqual(row["flops"] or 0, flops, name)
        self.assertGreater(table[("aten::mm", "step thread")]["flops"], 0)
        # The share of step time the summary's top ops hold, from the table's own rows.
        in_step = sorted((row["self_ms"] for (name, where), row in table.items()
                          if where == "step thread"), reverse=True)
        with open(os.path.join(out, f"ops_rank{rank}.txt")) as f:
            self.assertIn("aten::mm", f.read())

        r = summary["ranks"][rank]
        self.assertEqual(r["rank"], rank)
        step_ms = [e["dur"] / 1000 for e in events
                   if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]
        self.assertAlmostEqual(r["step_time_ms"], sum(step_ms) / len(step_ms), delta=1e-6)
        split = r["breakdown_ms"]
        self.assertAlmostEqual(split["compute"] + split["exposed_comm"] + split["idle"],
                               r["step_time_ms"], delta=1e-6)
        if world > 1:
            self.assertGreater(split["exposed_comm"], 0)
        else:
            # Alone, the step's thread runs ATen ops nearly all the time.
            self.assertEqual(split["exposed_comm"], 0)
            self.assertGreater(split["compute"], 0.5 * r["step_time_ms"])
        # 1e-6 as the sums above: the trace's durations are printed decimals, summed in another
        # order here (1e-9 failed once by 1.3e-9).
        self.assertAlmostEqual(r["top_ops_share_of_step_time"], sum(in_step[:20]) / sum(step_ms),
                               delta=1e-6)
        self.assertGreaterEqual(r["top_ops_share_of_step_time"], 0.8)
        peak = r["peak_memory_by_category"]
        most = r["max_memory_by_category"]
        self.assertEqual(sorted(peak), sorted(CATEGORIES))
        self.assertEqual(sum(peak.values()), r["peak_memory_bytes"])
        params, optimizer = logged[rank]
        self.assertEqual(peak["parameters"], params)
        self.assertEqual(most["parameters"], params)
        # Every parameter (or shard) has a gradient of its size when the optimizer steps.
        self.assertEqual(most["gradients"], params)
        # AdamW's two moments (each the parameters' size) and a float32 step per parameter
        # tensor, as the optimizer holds them and the trainer logs them.
        self.assertEqual(most["optimizer_state"], optimizer)
        tensors, rest = divmod(optimizer - 2 * params, 4)
        self.assertEqual(rest, 0)
        self.assertGreater(tensors, 0)
        self.assertGreater(most["activations"], 0)
        if world > 1:
            self.assertGreater(most["communication"], 0)
        else:
            self.assertEqual(most["communication"], 0)
        print(f"\nrank {rank}/{world}: step {r['step_time_ms']:.1f} ms = compute "
              f"{split['compute']:.1f} + exposed comm {split['exposed_comm']:.1f} + idle "
              f"{split['idle']:.1f}; top ops {100 * r['top_ops_share_of_step_time']:.1f}%; peak "
              f"{r['peak_memory_bytes'] / 2**20:.1f} MiB: "
              + ", ".join(f"{c} {peak[c] / 2**20:.1f}" for c in CATEGORIES), file=sys.stderr)
        return params

    def check_hta_trace_dir(self, folder, expected):
        """HolisticTraceAnalysis's TraceAnalysis(trace_dir=folder), as hta/common/trace_file.py
        create_rank_to_trace_dict reads it: every file ending in .json or .gz (not recursing) is
        parsed and must hold distributedInfo.rank, an int >= 0; it fails on any other. Here also
        one file per rank and nothing else in the folder: `expected` is rank -> file name."""
        names = sorted(os.listdir(folder))
        self.assertEqual(names, sorted(expected.values()))
        ranks = {}
        for name in names:
            self.assertTrue(name.endswith(".json") or name.endswith(".gz"), name)
            opener = gzip.open if name.endswith(".gz") else open
            with opener(os.path.join(folder, name), "rb") as f:
                data = json.loads(f.read())
            rank = data["distributedInfo"]["rank"]
            self.assertIs(type(rank), int, name)  # not a bool, not a string
            self.assertGreaterEqual(rank, 0, name)
            self.assertNotIn(rank, ranks, name)
            ranks[rank] = name
        self.assertEqual(ranks, expected)

    def check_report(self, out, world):
        with open(os.path.join(out, "report.html")) as f:
            html = f.read()
        svgs = re.findall(r"<svg .*?</svg>", html, re.S)
        self.assertEqual(len(svgs), 2 + world)  # step split, a memory timeline per rank, top ops
        for svg in svgs:
            ElementTree.fromstring(svg)  # well-formed
        self.assertNotIn("<script", html)
        self.assertNotRegex(html, r"(src|href)=")

    def test_one_process(self):
        out = os.path.join(self.tmp, "one")
        # A job file tracing on titan_train's schedule: profile_run replaces it.
        job = os.path.join(self.tmp, "one_job.toml")
        with open(CONFIG) as f:
            text = f.read()
        with open(job, "w") as f:
            f.write(text.replace("enable_profiling = false", "enable_profiling = true\n"
                                 "profiler_active = 2")
                    .replace('async_mode = "disabled"', 'async_mode = "async"\n'
                             "enable_first_step_checkpoint = true"))
        proc = profile(out, 1, "--training.local_batch_size=4", config=job)
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(len(summary["ranks"]), 1)
        self.check_rank(out, 0, summary, state_bytes(proc.stderr), 1)
        # torch.profiler writes no distributedInfo for one process; HTA needs its rank.
        self.check_hta_trace_dir(traces(out), {0: "trace_rank0.json"})
        self.check_report(out, 1)
        # Kineto's CUDA probes fail without a GPU: their errors are not the user's.
        self.assertNotIn("gpuGetDeviceCount", proc.stderr)
        # The job's own dump folder and checkpoints are untouched; the run's config lands in out.
        self.assertTrue(os.path.exists(os.path.join(out, "config.toml")))
        # It records [profiling] at its defaults: the job file's schedule did not run.
        with open(os.path.join(out, "config.toml"), "rb") as f:
            self.assertEqual(tomllib.load(f)["profiling"], PROFILING_DEFAULTS)
        # It runs again: the saving keys that need [checkpoint] enable went back to their defaults.
        rerun = subprocess.run([TITAN_TRAIN, f"--job.config_file={out}/config.toml",
                                f"--job.dump_folder={self.tmp}/rerun", "--training.steps=0"],
                               capture_output=True, text=True, timeout=120)
        self.assertEqual(rerun.returncode, 0, rerun.stderr[-2000:])
        self.assertFalse(os.path.exists(os.path.join(out, "checkpoint")))

    def test_fsdp_two_ranks(self):
        out = os.path.join(self.tmp, "fsdp")
        proc = profile(out, 2, "--training.local_batch_size=4",
                       "--parallelism.data_parallel_shard_degree=2")
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual([r["rank"] for r in summary["ranks"]], [0, 1])
        logged = state_bytes(proc.stderr)
        for rank in range(2):
            self.check_rank(out, rank, summary, logged, 2)
            # torch.profiler's metadata, by which HolisticTraceAnalysis tells the ranks apart.
            with open(os.path.join(traces(out), f"trace_rank{rank}.json")) as f:
                text = f.read()
            info = json.loads(text)["distributedInfo"]
            # HTA takes a file's rank from its first line matching this (json.dumps' spacing).
            self.assertEqual(re.search(r'"rank":\s+(\d+)', text)[1], str(rank))
            self.assertEqual((info["backend"], info["rank"], info["world_size"]), ("gloo", rank, 2))
            self.assertEqual(info["pg_count"], len(info["pg_config"]))
            self.assertIn([2, [0, 1]], [[g["pg_size"], g["ranks"]] for g in info["pg_config"]])
            # summary.json and report.html name the trace relative to --out.
            self.assertEqual(summary["ranks"][rank]["trace"], f"traces/trace_rank{rank}.json")
        self.check_hta_trace_dir(traces(out), {0: "trace_rank0.json", 1: "trace_rank1.json"})
        self.check_report(out, 2)
        with open(os.path.join(out, "report.html")) as f:
            self.assertIn("<code>traces/trace_rank0.json</code> <code>traces/trace_rank1.json</code>",
                          f.read())

    def test_gzip_over_an_earlier_run_with_spaced_flags_and_refusals(self):
        out = os.path.join(self.tmp, "gzip")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(traces(out))
        # An earlier run's per-rank outputs (two ranks, no gzip), its summary.json and report.html,
        # and files of the user's, one a dangling link named like an output: links are left alone.
        earlier = ["ops_rank1.txt", "ops_rank1.json", "profile_rank1.json",
                   "memory_snapshot_rank1.pickle", "summary.json", "report.html",
                   "summary.json.tmp.12345",
                   # Traces where an earlier version wrote them, and a temporary of one.
                   "trace_rank0.json", "trace_rank1.json.gz", "trace_rank0.json.tmp"]
        earlier_traces = ["trace_rank0.json", "trace_rank1.json", "trace_rank1.json.gz",
                          # Temporaries of a run stopped mid-write: Kineto's, and gzip's.
                          "trace_rank0.json.tmp", "trace_rank0.json.gz.tmp.12345"]
        for name in earlier + ["notes.txt", "trace_rank0.json.bak"]:
            with open(os.path.join(out, name), "w") as f:
                f.write("earlier\n")
        for name in earlier_traces:
            with open(os.path.join(traces(out), name), "w") as f:
                f.write("earlier\n")
        os.symlink("/nonexistent", os.path.join(out, "trace_rank2.json"))
        proc = run([PROFILE_RUN, *COMMON, "--out", out, "--profile.warmup", str(WARMUP),
                    "--profile.active", str(ACTIVE), "--training.local_batch_size", "2",
                    "--training.global_batch_size", "4", "--profile.gzip"])
        self.assertIn(f"removed {len(earlier) + len(earlier_traces)} files of an earlier run from "
                      f"{out}", proc.stderr)
        self.assertEqual(sorted(os.listdir(out)),
                         [".titan.lock", "config.toml", "notes.txt", "ops_rank0.json",
                          "ops_rank0.txt", "profile_rank0.json", "report.html", "summary.json",
                          "trace_rank0.json.bak", "trace_rank2.json", "traces"])
        self.check_hta_trace_dir(traces(out), {0: "trace_rank0.json.gz"})
        self.assertTrue(os.path.islink(os.path.join(out, "trace_rank2.json")))
        # The last traced step's time ends where its ProfilerStep range does; stopping the
        # profiler and writing the trace are logged apart.
        last = WARMUP + ACTIVE
        logged = re.search(rf"step {last} \(traced\)  loss \S+  (\d+) ms, then (\d+) ms stopping "
                           "the profiler and writing the trace", proc.stderr)
        self.assertIsNotNone(logged, proc.stderr[-2000:])
        with gzip.open(os.path.join(traces(out), "trace_rank0.json.gz"), "rt") as f:
            events = json.load(f)["traceEvents"]
        # Gradient accumulation: two microbatches of 2 x 128 tokens per step, as each step ran.
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual((summary["microbatches_per_step"], summary["global_batch_size"],
                          summary["tokens_per_step"]), (2, 4, 4 * 128))
        forwards = [e for e in events if e.get("ph") == "X" and e["name"] == "forward"]
        self.assertEqual(len(forwards), 2 * ACTIVE)
        with open(os.path.join(out, "report.html")) as f:
            self.assertIn("each of 2 microbatch(es) of 2 x 128 tokens per rank, 512 tokens per "
                          "step in all", f.read())
        traced_ms = [e["dur"] / 1000 for e in events if e.get("name") == f"ProfilerStep#{last}"]
        step_ms, stop_ms = int(logged.group(1)), int(logged.group(2))
        self.assertLess(step_ms, traced_ms[0] + stop_ms)
        proc = subprocess.run([PROFILE_RUN, *COMMON, f"--out={out}", "--training.steps=3"],
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("profile_run: --training.steps: [training] steps=3: profile_run needs "
                      "--profile.warmup=2 + --profile.active=3 = 5 steps", proc.stderr)
        dumps = os.path.join(self.tmp, "garbage_dumps")
        os.makedirs(dumps, exist_ok=True)
        with open(os.path.join(dumps, "rank_0"), "w") as f:
            f.write("garbage\n")
        # Each refusal: exit 1 and one line saying what was expected, before any work.
        for args, message in [
                (["--profile.gzip=yes"], '--profile.gzip: expected true or false, got "yes"'),
                # titan_train's words for an integer key, from the same parser.
                (["--profile.active=99999999999"],
                 '--profile.active: expected 32-bit integer, got "99999999999"'),
                (["--profile.active=abc"], '--profile.active: expected integer, got "abc"'),
                (["--out="], "--out: expected --out=DIR"),
                ([f"--analyze_comm_trace={dumps}", "--json"],
                 "--analyze_comm_trace takes only --comm_trace_prefix, got --json"),
                ([f"--out={out}", "--comm_trace_prefix=r"],
                 "--comm_trace_prefix applies to --analyze_comm_trace only"),
                ([f"--analyze_comm_trace={dumps}"], "rank_0: not a flight-recorder dump: ")]:
            proc = subprocess.run([PROFILE_RUN, *args], capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 1, args)
            self.assertIn(message, proc.stderr)
            self.assertNotIn("frame #", proc.stderr)  # no C++ backtrace

    def test_refusals_before_any_work(self):
        out = os.path.join(self.tmp, "refused")
        shutil.rmtree(out, ignore_errors=True)
        # Each refusal: exit 1 and one line naming the flags or keys the user passed.
        for tool, args, message in [
                # warmup + active past INT_MAX must not wrap negative and pass.
                (PROFILE_RUN, [f"--out={out}", "--profile.warmup=2147483647",
                               "--profile.active=1"],
                 "[training] steps=30: profile_run needs --profile.warmup=2147483647 + "
                 "--profile.active=1 = 2147483648 steps"),
                (TITAN_TRAIN, [f"--job.dump_folder={out}", "--training.steps=6",
                               "--profiling.enable_profiling", "--profiling.profile_freq=3",
                               "--profiling.profiler_warmup=2147483647",
                               "--profiling.profiler_active=1"],
                 "[profiling] profiler_warmup=2147483647 + profiler_active=1 exceeds "
                 "profile_freq=3"),
                # profile_run replaces [profiling]: its keys are refused, not ignored.
                (PROFILE_RUN, [f"--out={out}", "--profiling.profiler_active=5",
                               "--profiling.enable_profiling=true",
                               "--profiling.save_traces_folder", out],
                 "--profiling.profiler_active (use --profile.active), "
                 "--profiling.enable_profiling (profile_run always traces), "
                 "--profiling.save_traces_folder (use --out): profile_run replaces titan_train's "
                 "[profiling] with its own flags; drop them"),
                # A [comm] key: refused in words of its own, not [profiling]'s.
                (PROFILE_RUN, [f"--out={out}", "--comm.save_traces_folder", out],
                 "profile_run: --comm.save_traces_folder: profile_run's collective flight "
                 "recorder dumps into comm_traces under --out, never the job's folder; drop it"),
                # It saves and resumes no checkpoint: [checkpoint] flags other than
                # initial_load_* would do nothing, and are refused, named in schema order.
                (PROFILE_RUN, [f"--out={out}", "--checkpoint.load_step=5",
                               "--checkpoint.keep_latest_k=1", "--checkpoint.interval=500",
                               "--checkpoint.enable_checkpoint"],
                 "profile_run: --checkpoint.enable_checkpoint, --checkpoint.keep_latest_k, "
                 "--checkpoint.load_step: profile_run saves and resumes no checkpoint, so "
                 "[checkpoint] keys other than initial_load_* do nothing there; drop them "
                 "(--checkpoint.initial_load_path profiles from a checkpoint's weights)"),
                # It profiles titan_train's job: titan_rl's [rl] is refused, not ignored.
                (PROFILE_RUN, [f"--out={out}", "--rl.algorithm=ppo"],
                 'profile_run: --rl.algorithm: [rl] algorithm = "ppo": [rl] is titan_rl\'s '
                 "section, which profile_run would ignore; leave it at its defaults or run "
                 "titan_rl"),
                (PROFILE_RUN, [f"--out={out}", "--rl.group_sizee=4"],
                 "profile_run: --rl.group_sizee: [rl] is titan_rl's section, which profile_run "
                 "would ignore; remove it or run titan_rl"),
                (PROFILE_RUN, [f"--out={out}", "--profile.bogus=1"],
                 "profile_run: --profile.bogus: unknown key of --profile.*; expected "
                 "--profile.warmup, --profile.active or --profile.gzip")]:
            proc = subprocess.run([tool, *COMMON, *args], capture_output=True, text=True,
                                  timeout=120)
            self.assertEqual(proc.returncode, 1, args)
            self.assertIn(message, proc.stderr)
            self.assertNotIn("frame #", proc.stderr)  # no C++ backtrace
            self.assertFalse(os.path.exists(out), args)

    def test_job_file_checkpoint_values_titan_train_refuses_are_refused(self):
        # profile_run skips a job file's [checkpoint] keys, but skipped is not ignored: a value
        # titan_train refuses is refused in the same words, naming the file's line.
        with open(CONFIG) as f:
            text = f.read()
        out = os.path.join(self.tmp, "refused_checkpoint")
        shutil.rmtree(out, ignore_errors=True)
        for name, old, new, message in [
                ("keep_1.toml", "keep_latest_k = 3", "keep_latest_k = 1",
                 "[checkpoint] keep_latest_k=1: expected 0 (keep all) or >= 2 (the newest "
                 "checkpoint may still be being written)"),
                ("load_off.toml", "enable = true\nfolder", "enable = false\nload_step = 5\nfolder",
                 "[checkpoint] load_step = 5 applies to [checkpoint] enable = true (resuming), "
                 "which is false: set it, or drop the key")]:
            self.assertEqual(text.count(old), 1, old)
            config = os.path.join(self.tmp, name)
            with open(config, "w") as f:
                f.write(text.replace(old, new))
            flags = [f"--job.config_file={config}", *COMMON[1:]]
            train = subprocess.run([TITAN_TRAIN, *flags, f"--job.dump_folder={out}"],
                                   capture_output=True, text=True, timeout=120)
            proc = subprocess.run([PROFILE_RUN, *flags, f"--out={out}"], capture_output=True,
                                  text=True, timeout=120)
            self.assertEqual((train.returncode, proc.returncode), (1, 1), name)
            self.assertIn(message, train.stderr)
            refusal = train.stderr[train.stderr.index("titan_train: "):].splitlines()[0]
            self.assertIn(refusal.replace("titan_train: ", "profile_run: ", 1), proc.stderr)
            self.assertNotIn("are skipped", proc.stderr)
            self.assertFalse(os.path.exists(out), name)

    def test_entries_of_the_traces_folder_it_did_not_write_are_refused(self):
        # HTA reads every .json / .gz file of <out>/traces as a rank's trace: a file of the user's
        # there, or a link or folder named like profile_run's (never replaced: not regular files),
        # would stay, and break HTA or the trace's write. profile_run refuses to start, naming
        # one, and changes nothing.
        out = os.path.join(self.tmp, "foreign_traces")
        shutil.rmtree(out, ignore_errors=True)
        # A folder where Kineto's temporary goes (named like one of profile_run's) is not its own.
        os.makedirs(os.path.join(traces(out), "trace_rank0.json.tmp"))
        with open(os.path.join(traces(out), "notes.json"), "w") as f:
            f.write("{}\n")
        os.symlink("/nonexistent", os.path.join(traces(out), "trace_rank3.json"))
        # An earlier run's trace is not foreign: it is replaced.
        with open(os.path.join(traces(out), "trace_rank0.json"), "w") as f:
            f.write("earlier\n")
        cmd = [PROFILE_RUN, *COMMON, f"--out={out}", "--training.seq_len=16",
               "--training.local_batch_size=1", "--profile.warmup=1", "--profile.active=1"]

        def check_refused(named, pronoun):
            before = sorted(os.listdir(traces(out)))
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
            self.assertIn(f"profile_run: --out: {traces(out)} holds {named}, which profile_run did "
                          "not write: that folder is for the run's traces alone "
                          "(HolisticTraceAnalysis reads every .json and .gz file in it as a rank's "
                          f"trace); move {pronoun} elsewhere, or use another --out", proc.stderr)
            self.assertNotIn("traced", proc.stderr)  # before any step
            self.assertEqual(sorted(os.listdir(traces(out))), before)

        check_refused("notes.json and 2 more entries", "them")
        os.remove(os.path.join(traces(out), "notes.json"))
        os.rmdir(os.path.join(traces(out), "trace_rank0.json.tmp"))
        check_refused("trace_rank3.json", "it")
        os.remove(os.path.join(traces(out), "trace_rank3.json"))
        run(cmd)
        self.assertEqual(os.listdir(traces(out)), ["trace_rank0.json"])
        self.check_hta_trace_dir(traces(out), {0: "trace_rank0.json"})  # this run's

    def test_out_that_is_a_file_is_named_as_out(self):
        # The job file sets [job] dump_folder, but --out replaced it: the error names --out alone.
        out = os.path.join(self.tmp, "out_is_a_file")
        with open(out, "w") as f:
            f.write("kept\n")
        proc = subprocess.run([PROFILE_RUN, *COMMON, f"--out={out}"], capture_output=True,
                              text=True, timeout=120)
        self.assertEqual(proc.returncode, 1)
        self.assertIn(f"profile_run: --out: {out}: is a file, not a folder", proc.stderr)
        self.assertNotIn("dump_folder", proc.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "kept\n")

    def test_no_job_given(self):
        # As titan_train: no job key would profile the built-in 10,000-step default job.
        out = os.path.join(self.tmp, "no_job")
        shutil.rmtree(out, ignore_errors=True)
        for args in [[f"--out={out}"], ["--nproc_per_node=2", f"--out={out}"]]:
            proc = subprocess.run([PROFILE_RUN, *args], capture_output=True, text=True,
                                  timeout=60)
            self.assertEqual(proc.returncode, 1, args)
            self.assertIn("profile_run: no job given: pass --job.config_file=FILE", proc.stderr)
            self.assertFalse(os.path.exists(out), args)

    def test_trace_past_the_file_size_limit_is_an_error_that_leaves_no_partial_files(self):
        # `ulimit -f`, as a full disk: SIGXFSZ is ignored, so the write fails and its cause is said
        # (it killed the process mid-write, leaving the partial trace). A folder in the place of
        # Kineto's temporary would fail it too, but profile_run refuses one at the start
        # (test_entries_of_the_traces_folder_it_did_not_write_are_refused; StepProfiler's unit
        # test covers that cause).
        out = os.path.join(self.tmp, "fsize")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(traces(out))
        # An earlier run's profile: its report, which names its trace, goes with the trace, so a
        # run that ends before its profile is written leaves no report of another run.
        for name in ("summary.json", "report.html", "traces/trace_rank0.json"):
            with open(os.path.join(out, name), "w") as f:
                f.write("earlier\n")
        limit = 200 * 1024
        proc = subprocess.run(
            [PROFILE_RUN, *COMMON, f"--out={out}", "--profile.warmup=0", "--profile.active=1",
             "--training.local_batch_size=1", "--training.seq_len=32"],
            capture_output=True, text=True, timeout=300,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn(f"Kineto wrote no trace to {out}/traces/trace_rank0.json: the file size limit "
                      f"(ulimit -f: {limit} bytes) stopped the trace", proc.stderr)
        # No metrics.jsonl: a run makes it at its first logged step.
        self.assertEqual(sorted(os.listdir(out)), [".titan.lock", "config.toml", "traces"])
        self.assertEqual(os.listdir(traces(out)), [])

    def test_validation_and_checkpoints_are_skipped_and_said_so(self):
        # The shipped debug job enables validation and checkpoints: profile_run profiles training
        # steps only, saves no checkpoint, and says so once, not once per rank.
        out = os.path.join(self.tmp, "validation")
        proc = run([PROFILE_RUN, "--nproc_per_node=2", f"--job.config_file={CONFIG}", f"--out={out}",
                    "--metrics.enable_tensorboard=false", "--training.steps=2",
                    "--training.seq_len=16", "--training.local_batch_size=1",
                    "--validation.enable=true", "--validation.seq_len=16",
                    "--validation.steps=1", "--validation.freq=1", "--profile.warmup=1",
                    "--profile.active=1", "--checkpoint.keep_latest_k=10"])
        self.assertEqual(proc.stderr.count(
            "[validation] enable = true: profile_run skips validation (titan_train would run it "
            "every [validation] freq = 1 steps)"), 1, proc.stderr[-3000:])
        # Skipped, not run unseen: the recorded job validates nothing either.
        with open(os.path.join(out, "config.toml"), "rb") as f:
            recorded = tomllib.load(f)
        self.assertFalse(recorded["validation"]["enable"])
        # The job file's [checkpoint] keys (titan_train's job files set them) are skipped and said
        # so once, but for keep_latest_k, which the flag puts back at its default: neither listed
        # nor refused. config.toml records them at their defaults.
        self.assertEqual(proc.stderr.count(
            "[checkpoint] enable = true, interval = 10, last_save_model_only = false: profile_run "
            "saves and resumes no checkpoint, so these are skipped ([checkpoint] "
            "initial_load_path still loads weights)"), 1, proc.stderr[-3000:])
        self.assertEqual((recorded["checkpoint"]["enable"], recorded["checkpoint"]["interval"],
                          recorded["checkpoint"]["keep_latest_k"]), (False, 500, 10))
        self.assertFalse(os.path.exists(os.path.join(out, "checkpoint")))

    def test_job_dump_folder_is_left_alone(self):
        # A live run's flight-recorder dumps in the job's dump folder (what SIGUSR1 leaves):
        # profile_run's own recorder dumps under --out, and moves nothing there.
        job = os.path.join(self.tmp, "job_dump")
        out = os.path.join(self.tmp, "job_dump_out")
        shutil.rmtree(job, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(os.path.join(job, "comm_traces"))
        for rank in range(2):
            with open(os.path.join(job, "comm_traces", f"rank_{rank}"), "w") as f:
                f.write("a live run's dump\n")
        proc = run([PROFILE_RUN, "--nproc_per_node=2", *COMMON, f"--job.dump_folder={job}",
                    f"--out={out}", "--profile.warmup=0", "--profile.active=1",
                    "--training.local_batch_size=1", "--training.seq_len=32"])
        self.assertNotIn("moved an earlier run's dumps", proc.stderr)
        self.assertEqual(sorted(os.listdir(job)), ["comm_traces"])
        self.assertEqual(sorted(os.listdir(os.path.join(job, "comm_traces"))),
                         ["rank_0", "rank_1"])

    def test_folder_in_use_names_out(self):
        out = os.path.join(self.tmp, "in_use")
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        # Another run holds the folder (FolderLock's flock on .titan.lock).
        with open(os.path.join(out, ".titan.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            proc = subprocess.run([PROFILE_RUN, *COMMON, f"--out={out}", "--profile.warmup=0",
                                   "--profile.active=1", "--training.local_batch_size=1",
                                   "--training.seq_len=32"],
                                  capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 1)
        self.assertIn(f"profile_run: --out: {out} is in use by another run", proc.stderr)

    def test_sigterm_during_the_trace_write_is_deferred(self):
        out = os.path.join(self.tmp, "sigterm")
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.Popen([PROFILE_RUN, *COMMON, f"--out={out}", "--profile.warmup=0",
                                 "--profile.active=1", "--training.local_batch_size=1",
                                 "--training.seq_len=32"],
                                stderr=subprocess.PIPE, text=True)
        stderr = []
        for line in proc.stderr:
            stderr.append(line)
            if "Dumping profiler traces" in line:
                proc.send_signal(signal.SIGTERM)
                break
        stderr.append(proc.stderr.read())
        proc.stderr.close()
        self.assertEqual(proc.wait(timeout=120), 0, "".join(stderr)[-2000:])
        self.assertIn("signal 15 received: finishing the profile first", "".join(stderr))
        self.assertEqual(os.listdir(traces(out)), ["trace_rank0.json"])
        self.assertTrue(os.path.exists(os.path.join(out, "report.html")))
        self.assertEqual([n for n in os.listdir(out) if ".tmp" in n], [])

    def test_titan_train_traces_every_profile_freq_steps(self):
        dump = os.path.join(self.tmp, "train")
        shutil.rmtree(dump, ignore_errors=True)
        run([TITAN_TRAIN, *COMMON, f"--job.dump_folder={dump}", "--training.steps=6",
             "--training.local_batch_size=2", "--checkpoint.enable=false",
             "--profiling.enable_profiling=true", "--profiling.profile_freq=3",
             "--profiling.profiler_warmup=1", "--profiling.profiler_active=1"])
        folder = os.path.join(dump, "profile_traces")
        self.assertEqual(sorted(os.listdir(folder)), ["iteration_3", "iteration_6"])
        for step in (3, 6):
            events = load_trace(os.path.join(folder, f"iteration_{step}", "rank0_trace.json"))
            markers = [e["name"] for e in events if e["name"].startswith("ProfilerStep#")]
            self.assertEqual(markers, [f"ProfilerStep#{step}"])
            self.assertTrue(any(e["name"] == "aten::mm" for e in events))
        off = os.path.join(self.tmp, "train_off")
        shutil.rmtree(off, ignore_errors=True)
        run([TITAN_TRAIN, *COMMON, f"--job.dump_folder={off}", "--training.steps=3",
             "--training.local_batch_size=2", "--checkpoint.enable=false"])
        self.assertFalse(os.path.exists(os.path.join(off, "profile_traces")))

    def test_titan_train_warns_of_a_resumed_run_that_ends_no_profiling_cycle(self):
        # Startup sees steps = 7 >= profile_freq = 4, but a run resumed at step 4 trains 5 to 7,
        # which end no cycle: it says so once it knows the step, and writes no trace.
        dump = os.path.join(self.tmp, "train_resumed")
        shutil.rmtree(dump, ignore_errors=True)
        flags = [TITAN_TRAIN, *COMMON, f"--job.dump_folder={dump}", "--training.seq_len=16",
                 "--training.local_batch_size=1", "--checkpoint.interval=4",
                 "--checkpoint.async_mode=disabled"]
        run([*flags, "--training.steps=4"])
        profiling = ["--profiling.enable_profiling=true", "--profiling.profile_freq=4",
                     "--profiling.profiler_warmup=1"]
        warning = ("[profiling] profile_freq = 4 has no multiple in steps 5 to 7, which this run "
                   "trains after resuming step 4 (no cycle ends: no trace or snapshot is "
                   "written): enable_profiling has no effect")
        proc = run([*flags, "--training.steps=7", *profiling])
        self.assertEqual(proc.stderr.count(warning), 1, proc.stderr[-3000:])
        folder = os.path.join(dump, "profile_traces")
        self.assertEqual(os.listdir(folder) if os.path.exists(folder) else [], [])
        # Resumed at step 7, the run reaches step 8: no warning, and the cycle's trace.
        proc = run([*flags, "--training.steps=8", *profiling])
        self.assertNotIn("has no effect", proc.stderr.replace(
            "[validation] enable = false: seq_len, steps have no effect", ""))
        self.assertEqual(os.listdir(folder), ["iteration_8"])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile_run", required=True)
    parser.add_argument("--titan_train", required=True)
    args, rest = parser.parse_known_args()
    PROFILE_RUN = os.path.abspath(args.profile_run)
    TITAN_TRAIN = os.path.abspath(args.titan_train)
    unittest.main(argv=[sys.argv[0], "-v", *rest])
