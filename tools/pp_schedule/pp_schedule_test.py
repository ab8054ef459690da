"""pp_schedule's command line: the input file it names, and what it refuses.

Usage: python3 pp_schedule_test.py <pp_schedule binary>
"""

import os
import subprocess
import sys
import tempfile
import unittest

BINARY = None


def run(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=60)


class PpScheduleTest(unittest.TestCase):
    def assert_refused(self, args, message):
        result = run(*args)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertEqual(result.stdout, "")
        self.assertIn(f"pp_schedule: {message}", result.stderr)

    def test_csv_round_trip(self):
        table = run("--schedule=1F1B", "--pp=2", "--microbatches=4")
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("idle fraction", table.stdout)
        csv = run("--schedule=1F1B", "--pp=2", "--microbatches=4", "--format=csv")
        self.assertEqual(csv.returncode, 0, csv.stderr)
        with tempfile.NamedTemporaryFile("w", suffix=".csv", dir=os.environ.get("TEST_TMPDIR"),
                                         delete=False) as f:
            f.write(csv.stdout)
        again = run("--schedule=1F1B", "--pp=2", "--microbatches=4", f"--csv={f.name}")
        self.assertEqual(again.stdout, table.stdout)

    def test_unreadable_csv_is_named(self):
        self.assert_refused(["--csv=/nonexistent.csv"],
                            "/nonexistent.csv: open failed: No such file or directory")
        folder = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.assert_refused([f"--csv={folder}"], f"{folder}: open failed: Is a directory")
        bad = os.path.join(folder, "bad.csv")
        with open(bad, "w") as f:
            f.write("0\n")
        self.assert_refused([f"--csv={bad}"], f'{bad}: line 1 (rank 0): pipeline action "0": ')

    def test_bad_flags_and_arguments_are_refused(self):
        self.assert_refused(["--format=xml"], '--format: expected table or csv, got "xml"')
        self.assert_refused(["--stages_per_rank=-1"],
                            "--stages_per_rank: expected 0 (the schedule's default) or more, "
                            "got -1")
        self.assert_refused(["--pp=2", "--microbatches=2000000000"],
                            "--pp x stages per rank x --microbatches: expected at most 1048576 "
                            "(stage, microbatch) pairs, got 2 x 1 x 2000000000")
        self.assert_refused(["--pp=1024", "--stages_per_rank=2000000000",
                             "--microbatches=2000000000"],
                            "--pp x stages per rank x --microbatches: expected at most 1048576 "
                            "(stage, microbatch) pairs, got 1024 x "
                            "2000000000 x 2000000000")
        self.assert_refused(["--pp=2000000000"], "--pp: expected 1 to 1024 ranks, got 2000000000")
        self.assert_refused(["--microbatches=0"], "--microbatches: expected a positive count, got 0")
        self.assert_refused(["--schedule=Foo"], '--schedule: unknown schedule "Foo"; expected GPipe, ')
        self.assert_refused(["--pp=2", "stray"],
                            'unexpected argument "stray"; flags are --name=value')


if __name__ == "__main__":
    BINARY = os.path.abspath(sys.argv[1])
    unittest.main(argv=sys.argv[:1], verbosity=2)
