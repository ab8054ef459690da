"""What a failed multi-process titan_train prints: short lines that say what failed and which rank,
never a LibTorch C++ backtrace (c10::Error's "Exception raised from ..." and "frame #N" lines,
which c10d's own log lines would carry). Two ranks of the debug model on loopback (CPU, Gloo).

Run from the Bazel runfiles root, where configs/ and assets/ resolve as in a checkout.
"""
import os
import signal
import socket
import subprocess
import threading
import time
import unittest

import train_runs
from train_runs import COMMON, GLOBAL_BATCH

BACKTRACE_MARKERS = ("Exception raised from", "frame #")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank, port):
    return dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def environ(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read().split(b"\0")


class JunkServer:
    """A TCP service that answers every request with an HTTP error: not a c10d store."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    @staticmethod
    def _answer(conn):
        with conn:
            try:
                while conn.recv(4096):
                    conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")
            except OSError:
                pass

    def close(self):
        self.sock.close()


class FailureOutputTest(unittest.TestCase):
    def setUp(self):
        self.dump = train_runs.fresh(os.environ.get("TEST_TMPDIR", "/tmp"), self.id())

    def assert_no_backtrace(self, stderr):
        for marker in BACKTRACE_MARKERS:
            self.assertNotIn(marker, stderr)

    def start_ranks(self):
        """Two ranks as torchrun starts them (no titan launcher to stop the survivor), training
        until killed."""
        port = free_port()
        cmd = [train_runs.TITAN_TRAIN, *COMMON, f"--job.dump_folder={self.dump}",
               "--training.steps=100000", f"--training.local_batch_size={GLOBAL_BATCH // 2}",
               "--checkpoint.enable=false", "--comm.train_timeout_seconds=20"]
        return [subprocess.Popen(cmd, env=rank_env(rank, port), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True) for rank in range(2)]

    def kill_after_steps(self, ranks, victim, steps=3):
        """SIGKILLs rank `victim` once `steps` steps are logged; the survivor's stderr."""
        metrics = os.path.join(self.dump, "metrics.jsonl")
        deadline = time.time() + 120
        while time.time() < deadline and all(r.poll() is None for r in ranks):
            if os.path.exists(metrics):
                with open(metrics) as f:
                    if len(f.readlines()) >= steps:
                        break
            time.sleep(0.1)
        ranks[victim].send_signal(signal.SIGKILL)
        survivor = ranks[1 - victim]
        try:
            _, stderr = survivor.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            survivor.kill()
            self.fail(f"rank {1 - victim} still running 60 s after rank {victim} was killed")
        finally:
            ranks[victim].communicate()
        self.assertNotEqual(survivor.returncode, 0, stderr[-3000:])
        return stderr

    def test_killed_store_host_is_named_without_a_backtrace(self):
        stderr = self.kill_after_steps(self.start_ranks(), victim=0)
        self.assert_no_backtrace(stderr)
        self.assertNotIn("[c10d]", stderr)  # c10d's warnings repeat what titan's line says
        self.assertRegex(stderr, r"titan_train: .*the store, hosted by rank 0, is gone: rank 0 "
                                 r"died or exited")

    def test_killed_peer_is_named_without_a_backtrace(self):
        stderr = self.kill_after_steps(self.start_ranks(), victim=1)
        self.assert_no_backtrace(stderr)
        # Killed before or inside the collective rank 0 waits in: named either way.
        self.assertRegex(stderr, r"titan_train: .*(ranks that did not arrive|ranks silent for the "
                                 r"last 2s \(died, stopped or exited\)): 1\n")

    def test_peer_killed_during_async_save_does_not_hold_the_survivor(self):
        # Rank 1 dies while an async save is in flight: rank 0's error ends the run, and the
        # save's commit, which would wait for rank 1's files until the commit timeout
        # (train_timeout_seconds, 120 here), is given up, so rank 0 prints its error at once.
        port = free_port()
        cmd = [train_runs.TITAN_TRAIN, *COMMON, f"--job.dump_folder={self.dump}",
               "--training.steps=100000", f"--training.local_batch_size={GLOBAL_BATCH // 2}",
               "--checkpoint.enable=true", "--checkpoint.interval=3",
               "--checkpoint.async_mode=async", "--comm.train_timeout_seconds=120"]
        ranks = [subprocess.Popen(cmd, env=rank_env(rank, port), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for rank in range(2)]
        folder = os.path.join(self.dump, "checkpoint")
        deadline = time.time() + 180
        saving = None
        while saving is None and time.time() < deadline and all(r.poll() is None for r in ranks):
            names = os.listdir(folder) if os.path.isdir(folder) else []
            saving = next((n for n in names if n.startswith("step-") and ".tmp-" in n), None)
            time.sleep(0.001)
        ranks[1].send_signal(signal.SIGKILL)
        ranks[1].communicate()
        self.assertIsNotNone(saving, "no save started")
        killed = time.time()
        try:
            _, stderr = ranks[0].communicate(timeout=60)
        except subprocess.TimeoutExpired:
            ranks[0].kill()
            ranks[0].communicate()
            self.fail(f"rank 0 still running 60 s after rank 1 was killed during {saving}")
        self.assertNotEqual(ranks[0].returncode, 0, stderr[-3000:])
        self.assertLess(time.time() - killed, 60)
        self.assert_no_backtrace(stderr)
        self.assertRegex(stderr, r"titan_train: .*(ranks that did not arrive|ranks silent for the "
                                 r"last 2s \(died, stopped or exited\)): 1\n")

    def test_survivor_error_reaches_the_launcher_when_a_rank_is_killed(self):
        # Rank 0 waits up to 5 s for the killed rank's trace dump before its error: the launcher's
        # grace period must outlast that, or rank 0 is SIGKILLed with its line unsaid.
        cmd = [train_runs.TITAN_TRAIN, *COMMON, "--nproc_per_node=2",
               f"--job.dump_folder={self.dump}", "--training.steps=100000",
               f"--training.local_batch_size={GLOBAL_BATCH // 2}", "--checkpoint.enable=false",
               "--comm.train_timeout_seconds=20"]
        launcher = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
        metrics = os.path.join(self.dump, "metrics.jsonl")
        deadline = time.time() + 120
        while time.time() < deadline and launcher.poll() is None:
            if os.path.exists(metrics):
                with open(metrics) as f:
                    if len(f.readlines()) >= 3:
                        break
            time.sleep(0.1)
        with open(f"/proc/{launcher.pid}/task/{launcher.pid}/children") as f:
            children = [int(pid) for pid in f.read().split()]
        rank1 = next(pid for pid in children if b"RANK=1" in environ(pid))
        os.kill(rank1, signal.SIGKILL)
        try:
            _, stderr = launcher.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            launcher.kill()
            self.fail("the launcher still runs 60 s after rank 1 was killed")
        self.assertEqual(launcher.returncode, 137, stderr[-3000:])
        self.assertIn("rank 1 was killed by signal 9", stderr)
        self.assertNotIn("rank 0 was stopped by signal 9", stderr)
        self.assertRegex(stderr, r"\[rank 0\] titan_train: .*(ranks that did not arrive|ranks "
                                 r"silent for the last 2s \(died, stopped or exited\)): 1\n")

    def test_master_port_of_another_service_is_said_in_one_line(self):
        junk = JunkServer()
        self.addCleanup(junk.close)
        cmd = [train_runs.TITAN_TRAIN, *COMMON, f"--job.dump_folder={self.dump}",
               f"--training.local_batch_size={GLOBAL_BATCH // 2}", "--comm.init_timeout_seconds=5"]
        started = time.time()
        proc = subprocess.run(cmd, env=rank_env(1, junk.port), capture_output=True, text=True,
                              timeout=60)
        took = time.time() - started
        self.assertEqual(proc.returncode, 1, proc.stderr[-3000:])
        self.assertLess(took, 20)
        self.assert_no_backtrace(proc.stderr)
        self.assertNotIn("retrying", proc.stderr)  # c10d's retries: one line says it all
        self.assertIn(f"titan_train: rendezvous: rank 1 of 2 could not reach the store at "
                      f"127.0.0.1:{junk.port} (MASTER_ADDR:MASTER_PORT) within 5s: something "
                      f"listens there but does not answer as a c10d store", proc.stderr)

    def test_finished_run_closes_the_store_without_c10d_lines(self):
        # Rank 0 hosts the store and ends first: the others' last store calls must not print
        # c10d's "recvValue failed" (with its backtrace) as the job ends well.
        proc = train_runs.train(self.dump, 2, GLOBAL_BATCH // 2, "--checkpoint.enable=false",
                                steps=2)
        self.assert_no_backtrace(proc.stderr)
        self.assertNotIn("[c10d]", proc.stderr)


if __name__ == "__main__":
    train_runs.main()
