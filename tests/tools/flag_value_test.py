"""Every tool refuses a flag given as `--flag VALUE` whose VALUE is another flag ("--output
--json"), before any work, instead of taking that flag as the value and leaving it unread; with
--json the refusal is a JSON line too. `--flag=VALUE` takes any value.

Usage: python3 flag_value_test.py <tool binary>...
"""
import json
import os
import subprocess
import sys
import unittest

TOOLS = {}


def run(tool, *args):
    return subprocess.run([TOOLS[tool], *args], capture_output=True, text=True, timeout=120,
                          cwd=os.environ.get("TEST_TMPDIR", "/tmp"))


class FlagValueTest(unittest.TestCase):
    def assert_refused(self, tool, args, message, code=1, json_error=False):
        proc = run(tool, *args)
        self.assertEqual(proc.returncode, code, proc.stderr)
        self.assertEqual(proc.stderr.splitlines()[-1], f"{tool}: {message}")
        self.assertNotIn("frame #", proc.stderr)
        if json_error:
            self.assertEqual(proc.stdout.count("\n"), 1, proc.stdout)
            self.assertEqual(json.loads(proc.stdout), {"error": message})
        else:
            self.assertEqual(proc.stdout, "")

    def test_gflags_tools_refuse_a_flag_as_a_value(self):
        for tool, args, message, code, json_error in [
                # The swallowed flag is --json: it is read, so the refusal is JSON too.
                ("convert_checkpoint", ["--from", "--json", "in", "out"],
                 "--from: missing value (the next argument, --json, is a flag; --from=VALUE "
                 "takes any value)", 1, True),
                ("checkpoint_inspect", ["--diff", "--json", "ckpt"],
                 "--diff: missing value (the next argument, --json, is a flag; --diff=VALUE "
                 "takes any value)", 2, True),
                ("download_assets", ["--local_dir", "--json", "--repo_id=a/b", "--offline"],
                 "--local_dir: missing value (the next argument, --json, is a flag; "
                 "--local_dir=VALUE takes any value)", 1, True),
                # gflags' single-dash spellings, and flags that are not strings.
                ("checkpoint_inspect", ["-rtol", "-json", "--diff=b", "a"],
                 "-rtol: missing value (the next argument, -json, is a flag; --rtol=VALUE takes "
                 "any value)", 2, True),
                ("pp_schedule", ["--schedule", "--format=csv"],
                 "--schedule: missing value (the next argument, --format=csv, is a flag; "
                 "--schedule=VALUE takes any value)", 1, False),
                ("pp_schedule", ["--pp", "--microbatches=8"],
                 "--pp: missing value (the next argument, --microbatches=8, is a flag; "
                 "--pp=VALUE takes any value)", 1, False),
                ("comm_trace_analyze", ["--prefix", "--logtostderr", "dumps"],
                 "--prefix: missing value (the next argument, --logtostderr, is a flag; "
                 "--prefix=VALUE takes any value)", 1, False)]:
            with self.subTest(tool=tool, args=args):
                self.assert_refused(tool, args, message, code, json_error)

    def test_a_value_that_is_not_a_flag_is_still_taken(self):
        proc = run("pp_schedule", "--format", "csv", "--pp", "2")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(proc.stdout.startswith("0F0,"), proc.stdout)
        # "-1" names no flag: it is --pp's value, which pp_schedule itself refuses.
        proc = run("pp_schedule", "--pp", "-1")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("--pp", proc.stderr)
        self.assertIn("-1", proc.stderr)
        self.assertNotIn("missing value", proc.stderr)

    def test_the_equals_form_takes_a_value_that_starts_with_dashes(self):
        # The user's literal choice: the format named "--json", refused by the tool as a format.
        proc = run("convert_checkpoint", "--json", "--to=--json", "in", "out")
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn('"--json"', json.loads(proc.stdout)["error"])
        self.assertNotIn("missing value", proc.stderr)

    def test_titan_rl_refuses_a_flag_as_a_file_name(self):
        # Before the job file is read: the one named here does not exist.
        job = "--job.config_file=no_such_job.toml"
        self.assert_refused("titan_rl", ["--generate", "--output", "--json", job],
                            "--output: missing value (the next argument, --json, is a flag; "
                            "--output=FILE takes any file name)", json_error=True)
        self.assert_refused("titan_rl", ["--step_rollouts", "--json", job],
                            "--step_rollouts: missing value (the next argument, --json, is a "
                            "flag; --step_rollouts=FILE takes any file name)", json_error=True)
        self.assert_refused("titan_rl", ["--step_rollouts", job],
                            f"--step_rollouts: missing value (the next argument, {job}, is a "
                            "flag; --step_rollouts=FILE takes any file name)")
        # Nothing after it: the same refusal, in the words the other tools use.
        self.assert_refused("titan_rl", ["--generate", job, "--output"],
                            "--output: missing value (--output=FILE)")

    def test_job_tools_refuse_a_flag_as_a_value(self):
        job = "--job.config_file=no_such_job.toml"
        for tool, args in (("titan_train", []), ("profile_run", ["--out=profile"]),
                           ("titan_rl", [])):
            with self.subTest(tool=tool):
                self.assert_refused(tool, [job, *args, "--job.dump_folder", "--training.steps=2"],
                                    "--job.dump_folder: missing value (string)")
        self.assert_refused("profile_run", ["--out", job],
                            f"--out: missing value (the next argument, {job}, is a flag; "
                            "--out=VALUE takes any value)")
        self.assert_refused("profile_run", ["--analyze_comm_trace=dumps", "--comm_trace_prefix",
                                            "--analyze_comm_trace=dumps"],
                            "--comm_trace_prefix: missing value (the next argument, "
                            "--analyze_comm_trace=dumps, is a flag; --comm_trace_prefix=VALUE "
                            "takes any value)")
        self.assert_refused("profile_run", [job, "--profile.warmup"],
                            "--profile.warmup: missing value (--profile.warmup=VALUE)")


if __name__ == "__main__":
    for path in sys.argv[1:]:
        TOOLS[os.path.basename(path)] = os.path.abspath(path)
    unittest.main(argv=[sys.argv[0]])
