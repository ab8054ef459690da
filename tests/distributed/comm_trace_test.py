"""The collective flight recorder end to end: 4 ranks on loopback (c10d Gloo), rank 2 sleeping before
an all-reduce past [comm] train_timeout_seconds. The job must stop soon after the timeout, every rank
(the sleeping one too) must leave a dump, and PyTorch's own analyzer, run from this Python
environment, must name the missing rank and the collective; so must titan's C++ equivalent, and
profile_run --analyze_comm_trace (its thin wrapper) with a per-rank progress table.

Run from the Bazel runfiles root.
"""
import argparse
import os
import pickle
import re
import shutil
import subprocess
import sys
import time
import unittest

HANG_RANK = None
ANALYZE = None
PROFILE_RUN = None
TIMEOUT_S = 3
RANKS = 4
WORLD = "gloo:pp+dp_replicate+dp_shard+cp+tp/0"
SHARD = "gloo:dp_shard/0"


def hang(dump, *flags, run_id="hang", fresh=True, ranks=RANKS, **hang_env):
    """Runs the job with rank 2 asleep (or as `hang_env` says); returns (seconds, exit status,
    stderr)."""
    if fresh:
        shutil.rmtree(dump, ignore_errors=True)
    env = dict(os.environ, HANG_RANK="2", HANG_SECONDS="120", HANG_OPS="3", HANG_RUN_ID=run_id)
    env.update(hang_env)
    cmd = [HANG_RANK, f"--nproc_per_node={ranks}", f"--job.dump_folder={dump}",
           f"--comm.train_timeout_seconds={TIMEOUT_S}", *flags]
    start = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    return time.time() - start, proc.returncode, proc.stderr


def load(path):
    with open(path, "rb") as f:
        return pickle.load(f)


class CommTraceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = os.environ.get("TEST_TMPDIR", "/tmp")

    def check_failed_in_time(self, seconds, status, stderr):
        self.assertNotEqual(status, 0, stderr[-3000:])
        # The waiting ranks give up after the timeout (plus the dump exchange), not after the sleep.
        failed = [float(s) for s in re.findall(r"all_reduce #7 on group \S+ \(job ranks 0,1,2,3\) "
                                               r"failed after ([\d.]+)s", stderr)]
        self.assertEqual(len(failed), RANKS - 1, stderr[-3000:])
        self.assertIn("ranks that did not arrive: 2", stderr)
        for s in failed:
            self.assertGreaterEqual(s, TIMEOUT_S - 0.1)
            self.assertLess(s, TIMEOUT_S + 5)
        print(f"\njob exited {status} after {seconds:.1f} s (process start included); the waiting "
              f"ranks failed after {', '.join(f'{s:.2f}' for s in failed)} s "
              f"(timeout {TIMEOUT_S} s)", file=sys.stderr)
        self.assertLess(seconds, TIMEOUT_S + 30)

    def fr_trace(self, folder):
        proc = subprocess.run(
            [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", folder],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        return proc.stdout + proc.stderr

    def analyze(self, folder, status=2):
        """comm_trace_analyze's output; `status`: its exit status (2: the members disagree)."""
        proc = subprocess.run([ANALYZE, folder], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, status, proc.stderr)
        return proc.stdout + proc.stderr

    def check_verdicts(self, folder):
        report = self.fr_trace(folder)
        print(f"\nfr_trace {folder}:\n{report}", file=sys.stderr)
        self.assertIn("Not all ranks joining collective, sequence number: 7", report)
        self.assertIn(f"group info: {WORLD}", report)
        self.assertIn("collective: nccl:all_reduce", report)
        self.assertIn("missing ranks: {2}", report)
        verdict = self.analyze(folder)
        print(f"comm_trace_analyze {folder}:\n{verdict}", file=sys.stderr)
        self.assertIn(f"group {WORLD} (ranks 0,1,2,3): collective #7 nccl:all_reduce (input sizes "
                      "[[16]], scheduled) never issued by ranks 2", verdict)
        proc = subprocess.run([PROFILE_RUN, f"--analyze_comm_trace={folder}"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stderr)  # comm_trace_analyze's: a disagreement
        print(f"profile_run --analyze_comm_trace={folder}:\n{proc.stdout}", file=sys.stderr)
        self.assertTrue(proc.stdout.startswith(verdict), proc.stdout)
        # The table: rank 2 stopped at the world group's collective #6 (its last, completed) while
        # the others issued #7.
        rows = {(m[0], int(m[1])): m for m in re.findall(
            r"^(\S+) +(\d+) +(\d+) +(\S+) +(\S+) +(\d+)(  <- missing)?$", proc.stdout, re.M)}
        self.assertEqual(rows[(WORLD, 2)][2:], ("6", "nccl:broadcast", "completed", "6",
                                                "  <- missing"))
        for rank in (0, 1, 3):
            self.assertEqual(rows[(WORLD, rank)][2:], ("7", "nccl:all_reduce", "scheduled", "6", ""))

    def test_every_rank_dumps_and_fr_trace_names_the_missing_rank(self):
        dump = os.path.join(self.tmp, "hang")
        self.check_failed_in_time(*hang(dump))
        folder = os.path.join(dump, "comm_traces")
        self.assertEqual(sorted(os.listdir(folder)), [f"rank_{r}" for r in range(RANKS)])
        self.check_verdicts(folder)
        # Rounds of (world all_reduce, dp_shard all_gather, world broadcast), then the world
        # all_reduce that rank 2 never reached: sequence numbers, sizes and states as issued.
        for rank in range(RANKS):
            entries = load(os.path.join(folder, f"rank_{rank}"))["entries"]
            self.assertEqual(len(entries), 10 if rank != 2 else 9)
            self.assertEqual([e["record_id"] for e in entries], list(range(len(entries))))
            for i, e in enumerate(entries[:9]):
                r, kind = divmod(i, 3)
                name, group, seq, sizes = [
                    ("nccl:all_reduce", WORLD, 2 * r + 1, [[r + 1, 4]]),
                    ("nccl:_all_gather_base", SHARD, r + 1, [[r + 1, 4]]),
                    ("nccl:broadcast", WORLD, 2 * r + 2, [[r + 1, 4]])][kind]
                self.assertEqual((e["profiling_name"], e["process_group"][0],
                                  e["collective_seq_id"], e["input_sizes"], e["state"]),
                                 (name, group, seq, sizes, "completed"))
            if rank != 2:
                last = entries[-1]
                self.assertEqual((last["profiling_name"], last["collective_seq_id"],
                                  last["input_sizes"], last["state"], last["timeout_ms"]),
                                 ("nccl:all_reduce", 7, [[16]], "scheduled", TIMEOUT_S * 1000))
            self.assertEqual(entries[1]["output_sizes"], [[4, 4]])

    def test_fr_trace_reads_batches_of_point_to_point_operations(self):
        # Two ranks exchange two tensors in a batch right after each world all-reduce, both
        # issuing their sends first (as ring attention does), then rank 1 sleeps past the timeout:
        # fr_trace must read the point-to-point entries without an error or mismatch and still name
        # the missing rank.
        dump = os.path.join(self.tmp, "p2p")
        _, status, stderr = hang(dump, ranks=2, HANG_RANK="1", HANG_P2P="1")
        self.assertNotEqual(status, 0, stderr[-3000:])
        folder = os.path.join(dump, "comm_traces")
        report = self.fr_trace(folder)
        print(f"\nfr_trace {folder}:\n{report}", file=sys.stderr)
        self.assertNotIn("MISMATCH", report)
        self.assertNotIn("mismatches", report)
        self.assertIn("Not all ranks joining collective, sequence number: 7", report)
        self.assertIn("missing ranks: {1}", report)
        verdict = self.analyze(folder)
        self.assertIn("never issued by ranks 1", verdict)
        # Rank 1 records its batch as rank 0's mirror image (receives from the lower rank first),
        # in the world group's point-to-point trace group.
        names = [e["profiling_name"] for e in load(os.path.join(folder, "rank_1"))["entries"]
                 if e["is_p2p"]]
        self.assertEqual(names[:4], ["nccl:recv 1<-0"] * 2 + ["nccl:send 1->0"] * 2)
        groups = {e["process_group"][0] for e in load(os.path.join(folder, "rank_1"))["entries"]
                  if e["is_p2p"]}
        self.assertEqual(groups, {WORLD + ":p2p"})

    def test_a_stopped_store_host_ends_the_job(self):
        # Rank 0 frozen (SIGSTOP: its store server too): the other rank's collective times out,
        # and its questions to the store (stragglers; with the recorder, dump requests) get no
        # answer; c10d's client would wait for one forever.
        for flags in ([], ["--comm.trace_buf_size=0"]):
            seconds, status, stderr = hang(os.path.join(self.tmp, "stopped_store"), *flags,
                                           ranks=2, HANG_RANK="0", HANG_STOP="1")
            self.assertEqual(status, 1, stderr[-3000:])
            self.assertRegex(stderr, r"all_reduce #\d+ on group \S+ (\(job ranks 0,1\) )?failed"
                                     r".*; the store \(hosted by rank 0\) gave no answer within "
                                     r"20s either: rank 0 may be the stuck rank")
            print(f"\n{flags}: the job ended {seconds:.1f} s after it started", file=sys.stderr)
            self.assertLess(seconds, TIMEOUT_S + 5 + 20 + 30)

    def test_a_store_host_stopped_then_continued_is_named_stalled(self):
        # Rank 0 frozen inside the all-reduce past the timeout, then continued before the store's
        # answer timeout: it had arrived and lives, so the other rank's report names it by its
        # stall.
        seconds, status, stderr = hang(os.path.join(self.tmp, "continued_store"), ranks=2,
                                       HANG_RANK="0", HANG_STOP="1", HANG_CONT_SECONDS="6")
        self.assertEqual(status, 1, stderr[-3000:])
        self.assertRegex(stderr, r"\[rank 1\] hang_rank: all_reduce #\d+ on group \S+ \(job ranks "
                                 r"0,1\) failed.*; "
                                 r"every rank arrived; ranks stalled while it ran \(the process "
                                 r"stopped, as by SIGSTOP, or starved of CPU\): 0 for [6-9]")
        self.assertLess(seconds, TIMEOUT_S + 6 + 30)

    def test_a_rank_continued_after_the_timeout_is_named_by_the_analyzer(self):
        # Rank 2 stopped (SIGSTOP) before the all-reduce, or inside it, and continued 5 s later,
        # after the others' 3 s timeout: it then issues the collective (or has) and dumps, so
        # every dump records it; the analyzer must still name the stall, never agree.
        for before, status, expected in (
                ("1", 2, re.escape(f"group {WORLD} (ranks 0,1,2,3): collective #7 nccl:all_reduce "
                                   "(input sizes [[16]], scheduled) ranks 2 issued it ") +
                 r"[4-6]\.\d s after rank [013], past rank [013]'s 3\.0 s timeout"),
                ("0", 3, re.escape(f"group {WORLD} (ranks 0,1,2,3): inconclusive, every member "
                                   "issued collective #7 nccl:all_reduce (input sizes [[16]], "
                                   "scheduled) and none completed it"))):
            dump = os.path.join(self.tmp, f"continued_{before}")
            _, _, stderr = hang(dump, HANG_STOP="1", HANG_CONT_SECONDS="5",
                                HANG_CONT_BEFORE=before)
            folder = os.path.join(dump, "comm_traces")
            self.assertEqual(sorted(os.listdir(folder)), [f"rank_{r}" for r in range(RANKS)],
                             stderr[-3000:])
            verdict = self.analyze(folder, status=status)
            print(f"\ncomm_trace_analyze {folder}:\n{verdict}", file=sys.stderr)
            self.assertRegex(verdict, expected)
            self.assertNotIn("issued the same collectives", verdict)

    def test_a_late_rank_reads_the_store_after_its_host_failed(self):
        # Rank 1 arrives after rank 0 (the store's host) timed out and reported: rank 0 stays up
        # at exit until rank 1's report has read its store.
        seconds, status, stderr = hang(os.path.join(self.tmp, "late_rank"),
                                       "--comm.trace_buf_size=0", ranks=2, HANG_RANK="1",
                                       HANG_SECONDS=str(TIMEOUT_S + 2))
        self.assertEqual(status, 1, stderr[-3000:])
        self.assertRegex(stderr, r"\[rank 0\] hang_rank: all_reduce #\d+ on group \S+ \(job ranks "
                                 r"0,1\) failed.*; ranks that did not arrive: 1")
        self.assertRegex(stderr, r"\[rank 1\] hang_rank: all_reduce #\d+ on group \S+ \(job ranks "
                                 r"0,1\) failed.*; every rank arrived")
        self.assertNotIn("is gone", stderr)
        self.assertLess(seconds, TIMEOUT_S + 2 + 30)

    def test_ring_keeps_the_newest_entries(self):
        dump = os.path.join(self.tmp, "ring")
        self.check_failed_in_time(*hang(dump, "--comm.trace_buf_size=4"))
        folder = os.path.join(dump, "comm_traces")
        for rank in range(RANKS):
            entries = load(os.path.join(folder, f"rank_{rank}"))["entries"]
            first = 6 if rank != 2 else 5
            self.assertEqual([e["record_id"] for e in entries], list(range(first, first + 4)))
        self.check_verdicts(folder)

    def test_a_rerun_sets_the_earlier_dumps_aside(self):
        dump = os.path.join(self.tmp, "rerun")
        # The first run's rank 1 hangs, the second's rank 2: fr_trace must read the second's alone.
        # c10d's recorder sizes, TORCH_NCCL_TRACE_BUFFER_SIZE an alias of TORCH_FR_BUFFER_SIZE,
        # are both ignored, and said so.
        seconds, status, stderr = hang(dump, run_id="first", HANG_RANK="1",
                                       TORCH_FR_BUFFER_SIZE="5", TORCH_NCCL_TRACE_BUFFER_SIZE="x")
        self.assertNotEqual(status, 0, stderr[-3000:])
        for setting in ("TORCH_FR_BUFFER_SIZE=5", "TORCH_NCCL_TRACE_BUFFER_SIZE=x"):
            self.assertIn(f"{setting} is ignored: [comm] trace_buf_size sizes titan's collective "
                          "recorder", stderr)
        self.check_failed_in_time(*hang(dump, run_id="second", fresh=False))
        folder = os.path.join(dump, "comm_traces")
        # Beside the folder, not in it: fr_trace reads subfolders' dumps, by file name, as its own.
        aside = f"{folder}.earlier-second"
        ranks = [f"rank_{r}" for r in range(RANKS)]
        self.assertEqual(sorted(os.listdir(folder)), ranks)
        self.assertEqual(sorted(os.listdir(aside)), ranks)
        for rank in ranks:
            self.assertEqual(load(os.path.join(folder, rank))["run_id"], "second")
            self.assertEqual(load(os.path.join(aside, rank))["run_id"], "first")
        self.check_verdicts(folder)
        # A dump of the first run put back beside the second's is refused, by name.
        shutil.copy(os.path.join(aside, "rank_3"), os.path.join(folder, "rank_3"))
        report = self.analyze(folder, status=1)
        self.assertIn("rank_3 (run first) come from different runs", report)

    def test_size_zero_records_nothing(self):
        dump = os.path.join(self.tmp, "off")
        self.check_failed_in_time(*hang(dump, "--comm.trace_buf_size=0"))
        self.assertFalse(os.path.exists(os.path.join(dump, "comm_traces")))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--hang_rank", required=True)
    parser.add_argument("--comm_trace_analyze", required=True)
    parser.add_argument("--profile_run", required=True)
    args, rest = parser.parse_known_args()
    HANG_RANK = os.path.abspath(args.hang_rank)
    ANALYZE = os.path.abspath(args.comm_trace_analyze)
    PROFILE_RUN = os.path.abspath(args.profile_run)
    unittest.main(argv=[sys.argv[0], "-v", *rest])
