"""Every tool fails, with one line on stderr, when its stdout cannot be written (/dev/full), as
coreutils do; a failing tool keeps its own exit status.

Usage: python3 stdout_test.py <tool binary>...
"""
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import unittest

TOOLS = {}
FULL = "No space left on device"


def run_to_full(tool, *args):
    with open("/dev/full", "w") as full:
        return subprocess.run([TOOLS[tool], *args], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)


class StdoutTest(unittest.TestCase):
    def assert_lost_output_fails(self, tool, *args, code=1):
        proc = run_to_full(tool, *args)
        self.assertEqual(proc.returncode, code, proc.stderr)
        self.assertEqual(proc.stderr.splitlines()[-1], f"{tool}: stdout: write failed: {FULL}")

    def test_help_to_a_full_disk_fails(self):
        for tool in TOOLS:
            with self.subTest(tool=tool):
                # checkpoint_inspect's 1 means "differs": its trouble is 2, as diff's.
                self.assert_lost_output_fails(tool, "--help",
                                              code=2 if tool == "checkpoint_inspect" else 1)

    def test_help_past_the_file_size_limit_fails(self):
        # stdout a file and `ulimit -f` 100 bytes: the write fails with EFBIG, which the tool
        # reports, instead of SIGXFSZ killing it (status -25 here).
        def limit_file_size():
            resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))

        path = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "help.txt")
        for tool in TOOLS:
            with self.subTest(tool=tool), open(path, "w") as out:
                proc = subprocess.run([TOOLS[tool], "--help"], stdout=out, stderr=subprocess.PIPE,
                                      text=True, timeout=120, preexec_fn=limit_file_size)
                self.assertEqual(proc.returncode, 2 if tool == "checkpoint_inspect" else 1,
                                 proc.stderr)
                self.assertEqual(proc.stderr.splitlines()[-1],
                                 f"{tool}: stdout: write failed: File too large")

    def test_output_to_a_reader_gone_ends_by_sigpipe_silently(self):
        # `| head -1`: SIGPIPE is ignored while the tool works (a write to the pipe fails, not
        # kills), then the lost stdout ends it by SIGPIPE (141), as the default would, no line.
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            for tool, args in [(tool, ["--help"]) for tool in TOOLS] + [
                    ("pp_schedule", ["--pp=8", "--microbatches=64"])]:
                with self.subTest(tool=tool, args=args):
                    proc = subprocess.run([TOOLS[tool], *args], stdout=write_end,
                                          stderr=subprocess.PIPE, text=True, timeout=120)
                    self.assertEqual(proc.returncode, -signal.SIGPIPE, proc.stderr)
                    self.assertEqual(proc.stderr, "")
        finally:
            os.close(write_end)

    def test_output_to_a_full_disk_fails(self):
        self.assert_lost_output_fails("pp_schedule", "--format=csv")
        # Larger than stdio's buffer: the write fails before exit, and its reason is still known.
        self.assert_lost_output_fails("pp_schedule", "--pp=8", "--microbatches=64")

    def test_a_failing_tool_keeps_its_message_and_status(self):
        proc = run_to_full("pp_schedule", "--format=bogus")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr, 'pp_schedule: --format: expected table or csv, got "bogus"\n')
        # Its --json error is lost too, and said so.
        proc = run_to_full("convert_checkpoint", "--json", "--to=xla", "a", "b")
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr.splitlines(), [
            'convert_checkpoint: checkpoint format "xla", expected titan, hf or meta',
            f"convert_checkpoint: stdout: write failed: {FULL}"])

    def test_a_lost_verdict_is_a_failure_not_a_verdict(self):
        # comm_trace_analyze's 2 (the members disagree) and 3 (inconclusive) are answers: output
        # lost, they exit 1, the tools' failure, as checkpoint_inspect's "differs" exits 2.
        folder = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "comm_traces")
        os.makedirs(folder, exist_ok=True)

        def dump(rank, elements):
            entry = {"process_group": ("world", "undefined"), "collective_seq_id": 1,
                     "profiling_name": "nccl:all_reduce", "state": "scheduled", "is_p2p": False,
                     "input_sizes": [[elements]], "output_sizes": [[elements]],
                     "input_dtypes": ["Float"], "output_dtypes": ["Float"]}
            with open(os.path.join(folder, f"rank_{rank}"), "wb") as f:
                pickle.dump({"pg_config": {"world": {"ranks": "[0, 1]"}}, "entries": [entry]},
                            f, protocol=2)

        for verdict, elements in ((2, 8), (3, None)):
            dump(0, 16)
            if elements is None:
                os.remove(os.path.join(folder, "rank_1"))
            else:
                dump(1, elements)
            for tool, args in (("comm_trace_analyze", [folder]),
                               ("profile_run", [f"--analyze_comm_trace={folder}"])):
                with self.subTest(tool=tool, verdict=verdict):
                    proc = subprocess.run([TOOLS[tool], *args], capture_output=True, timeout=60)
                    self.assertEqual(proc.returncode, verdict, proc.stderr)
                    self.assert_lost_output_fails(tool, *args)

    def test_a_flag_refused_under_json_is_a_json_error_too(self):
        # gflags' own refusals (an unknown flag, a missing value), before the tool runs.
        for tool, code in (("convert_checkpoint", 1), ("checkpoint_inspect", 2),
                           ("download_assets", 1)):
            with self.subTest(tool=tool):
                proc = subprocess.run([TOOLS[tool], "--json", "--bogus=1"], capture_output=True,
                                      text=True, timeout=60)
                self.assertEqual(proc.returncode, code, proc.stderr)
                self.assertEqual(json.loads(proc.stdout),
                                 {"error": "unknown command line flag 'bogus'"})
                self.assertEqual(proc.stderr, f"{tool}: unknown command line flag 'bogus'\n")
        # --json as gflags reads it: any spelling of true, the last one given.
        for flags, json_error in ((["--json=yes"], True), (["--bogus=1", "--json=1"], True),
                                  (["--json", "--nojson"], False), (["--json=false"], False),
                                  ([], False)):
            with self.subTest(flags=flags):
                proc = subprocess.run([TOOLS["convert_checkpoint"], *flags, "--bogus=1"],
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(proc.returncode, 1, proc.stderr)
                self.assertEqual(proc.stdout,
                                 '{"error":"unknown command line flag \'bogus\'"}\n'
                                 if json_error else "")

    def test_a_refused_flag_reads_as_the_tools_own_error(self):
        # One `<tool>: <message>` line, as the tools' own errors, not gflags' "ERROR: ...".
        for tool, flag, code in (("comm_trace_analyze", "--json", 1), ("pp_schedule", "--bogus", 1),
                                 ("checkpoint_inspect", "--rtol", 2)):
            with self.subTest(tool=tool):
                proc = subprocess.run([TOOLS[tool], flag], capture_output=True, text=True,
                                      timeout=60)
                self.assertEqual(proc.returncode, code, proc.stderr)
                self.assertEqual(proc.stdout, "")
                self.assertRegex(proc.stderr, f"^{tool}: [^\n]*{flag[2:]}[^\n]*\n$")

    def test_output_that_is_written_exits_zero(self):
        proc = subprocess.run([TOOLS["pp_schedule"], "--format=csv"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stderr, "")
        self.assertTrue(proc.stdout.startswith("0F0,"), proc.stdout)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        TOOLS[os.path.basename(path)] = os.path.abspath(path)
    unittest.main(argv=[sys.argv[0]])
