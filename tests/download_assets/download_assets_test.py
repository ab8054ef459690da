"""Runs the download_assets binary against fake_hub.py on loopback, one fault scenario per test.

Usage: python3 download_assets_test.py <download_assets binary> <fake_hub.py>
"""

import fcntl
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

BINARY = None
FAKE_HUB = None
TOKEN = "hf_SeCrEtToKeN0123456789abcdefXYZ"
COMMIT = "d1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4"
SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
MiB = 1 << 20


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def build_repos(root):
    rng = random.Random(1234)
    model = os.path.join(root, "org", "model")
    for name, data in {
        "config.json": b'{"dim": 64, "n_layers": 2}',
        "generation_config.json": b'{"temperature": 0.6}',
        "tokenizer.json": json.dumps({"model": {"vocab": {f"t{i}": i for i in range(500)}}}).encode(),
        "tokenizer_config.json": b'{"bos_token": "<|begin_of_text|>"}',
        "special_tokens_map.json": b'{"bos_token": "<|begin_of_text|>"}',
        "original/tokenizer.model": rng.randbytes(300 * 1024),
        "README.md": b"# model\n",
        SHARD1: rng.randbytes(3 * MiB + 123),
        SHARD2: rng.randbytes(2 * MiB + 7),
        "model.safetensors.index.json": json.dumps({"metadata": {}, "weight_map": {
            "a.weight": SHARD1, "b.weight": SHARD2, "c.weight": SHARD1}}).encode(),
    }.items():
        write(os.path.join(model, name), data)
    gated = os.path.join(root, "org", "gated")
    write(os.path.join(gated, "config.json"), b'{"gated": true}')
    write(os.path.join(gated, "tokenizer.json"), b'{"model": {}}')
    write(os.path.join(gated, "original/tokenizer.model"), rng.randbytes(64 * 1024))
    write(os.path.join(root, "org", "evil", "config.json"), b"{}")
    clash = os.path.join(root, "org", "clash")
    write(os.path.join(clash, "config.json"), b'{"dim": 8}')
    write(os.path.join(clash, ".cache/download_assets/config.json.meta.json"), b'{"size": 1}')
    # Another repo named "model": by default both land in <local_dir>/model.
    write(os.path.join(root, "other", "model", "config.json"), b'{"dim": 32}')
    write(os.path.join(root, "org", "bad_index", "model.safetensors.index.json"),
          b'{"weight_map": {"a.weight": "model-00001-of-00001.safetensors",')
    write(os.path.join(root, "org", "bad_index", "model-00001-of-00001.safetensors"), b"\0" * 16)
    dot_cache = os.path.join(root, "org", "dot_cache")
    write(os.path.join(dot_cache, "config.json"), b'{"dim": 8}')
    write(os.path.join(dot_cache, ".cache"), b"a file where the state folder goes\n")


class FakeHub:
    def __init__(self, repos, config):
        workdir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.log = os.path.join(workdir, "requests.log")
        port_file = os.path.join(workdir, "ports.json")
        config_path = os.path.join(workdir, "config.json")
        with open(config_path, "w") as f:
            json.dump(dict(config, commit=COMMIT, gated={"org/gated": TOKEN}), f)
        self.process = subprocess.Popen([sys.executable, FAKE_HUB, "--repos", repos, "--config",
                                         config_path, "--port_file", port_file, "--log", self.log,
                                         "--lifetime", "60"])
        for _ in range(200):
            if os.path.exists(port_file):
                break
            time.sleep(0.05)
        with open(port_file) as f:
            self.ports = json.load(f)
        self.endpoint = f"http://127.0.0.1:{self.ports['hub']}"

    def requests(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return [json.loads(line) for line in f]

    def stop(self):
        self.process.kill()
        self.process.wait()


class DownloadAssetsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.repos = os.path.join(cls.root, "repos")
        build_repos(cls.repos)

    def setUp(self):
        self.workdir = tempfile.mkdtemp(dir=self.root)
        self.local_dir = os.path.join(self.workdir, "assets")
        self.hub = None

    def tearDown(self):
        if self.hub:
            self.hub.stop()

    def serve(self, **config):
        self.hub = FakeHub(self.repos, config)

    def run_tool(self, *args, env=None, token_env=False):
        environment = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        environment.update({"HF_ENDPOINT": self.hub.endpoint, "HF_HOME": self.workdir})
        if token_env:
            environment["HF_TOKEN"] = TOKEN
        environment.update(env or {})
        command = [BINARY, f"--local_dir={self.local_dir}", "--retry_base_ms=20",
                   "--retry_max_ms=200", "--stall_timeout_s=1", "--connect_timeout_s=5", "--json",
                   *args]
        result = subprocess.run(command, env=environment, capture_output=True, text=True,
                                timeout=60)
        summary = json.loads(result.stdout) if result.stdout.strip() else None
        return result, summary

    def repo_bytes(self, repo, path):
        with open(os.path.join(self.repos, "org", repo, path), "rb") as f:
            return f.read()

    def assert_identical(self, repo, paths):
        for path in paths:
            with open(os.path.join(self.local_dir, repo, path), "rb") as f:
                self.assertEqual(f.read(), self.repo_bytes(repo, path), path)

    def files_on_disk(self, repo="model"):
        base = os.path.join(self.local_dir, repo)
        found = []
        for dirpath, _, filenames in os.walk(base):
            found += [os.path.relpath(os.path.join(dirpath, f), base) for f in filenames]
        return sorted(p for p in found if not p.startswith(".cache"))

    def test_assets_download_then_rerun_is_noop_and_offline_works(self):
        self.serve()
        result, summary = self.run_tool("--repo_id=org/model",
                                        "--assets=tokenizer,config,safetensors")
        self.assertEqual(result.returncode, 0, result.stderr)
        wanted = ["config.json", "generation_config.json", SHARD1, SHARD2,
                  "model.safetensors.index.json", "original/tokenizer.model",
                  "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
        self.assertEqual(self.files_on_disk(), wanted)
        self.assert_identical("model", wanted)
        self.assertEqual(summary["commit"], COMMIT)
        self.assertEqual({f["status"] for f in summary["files"]}, {"downloaded"})
        redirected = [r for r in self.hub.requests() if r["server"] == "storage"]
        self.assertEqual(len(redirected), 3)  # the two shards and tokenizer.model, via 302

        again, summary = self.run_tool("--repo_id=org/model",
                                       "--assets=tokenizer,config,safetensors")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("everything is up to date", again.stderr)
        self.assertEqual(summary["bytes_fetched"], 0)
        self.assertEqual({f["status"] for f in summary["files"]}, {"up_to_date"})

        self.hub.stop()
        self.hub.endpoint = "http://127.0.0.1:9"  # nothing listens: --offline must not connect
        offline, summary = self.run_tool("--repo_id=org/model", "--assets=config,safetensors",
                                         "--offline")
        self.assertEqual(offline.returncode, 0, offline.stderr)
        self.assertEqual(len(summary["files"]), 5)
        unknown, _ = self.run_tool("--repo_id=org/unknown", "--assets=config", "--offline")
        self.assertEqual(unknown.returncode, 1)
        self.assertIn("--offline: no saved listing of org/unknown@main", unknown.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.local_dir, "unknown")))  # nor a lock
        # An offline failure says which file and why.
        base = os.path.join(self.local_dir, "model")
        config_size = os.path.getsize(os.path.join(base, "config.json"))
        with open(os.path.join(base, "config.json"), "ab") as f:
            f.write(b" ")
        os.remove(os.path.join(base, SHARD2))
        broken, summary = self.run_tool("--repo_id=org/model", "--assets=config,safetensors",
                                        "--offline")
        self.assertEqual(broken.returncode, 1)
        errors = {f["path"]: f.get("error") for f in summary["files"]}
        self.assertEqual(errors["config.json"], f"--offline: {base}/config.json has "
                         f"{config_size + 1} bytes, the listing says {config_size}")
        self.assertEqual(errors[SHARD2], f"--offline: {base}/{SHARD2} is missing")
        self.assertIsNone(errors[SHARD1])
        os.remove(os.path.join(base, "model.safetensors.index.json"))
        no_index, _ = self.run_tool("--repo_id=org/model", "--assets=safetensors", "--offline")
        self.assertEqual(no_index.returncode, 1)
        self.assertIn(f"--offline: {base}/model.safetensors.index.json is missing",
                      no_index.stderr)
        self.hub = None

    def flip_byte_behind_mtime(self, path):
        before = os.stat(path)
        with open(path, "r+b") as f:
            f.seek(1000)
            byte = f.read(1)
            f.seek(1000)
            f.write(bytes([byte[0] ^ 0xFF]))
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    def test_verify_rehashes_and_repairs_a_file_changed_behind_its_mtime(self):
        self.serve()
        result, _ = self.run_tool("--repo_id=org/model", "--assets=config,safetensors")
        self.assertEqual(result.returncode, 0, result.stderr)
        shard = os.path.join(self.local_dir, "model", SHARD1)
        self.flip_byte_behind_mtime(shard)
        offline, _ = self.run_tool("--repo_id=org/model", "--assets=safetensors", "--offline")
        self.assertEqual(offline.returncode, 0, offline.stderr)  # trusts the size and mtime
        checked, summary = self.run_tool("--repo_id=org/model", "--assets=safetensors",
                                         "--offline", "--verify")
        self.assertEqual(checked.returncode, 1)
        self.assertIn(f"{SHARD1}: the file on disk does not verify: sha256 expected", checked.stderr)
        self.assertEqual({f["path"]: f["status"] for f in summary["files"]},
                         {SHARD1: "failed", SHARD2: "up_to_date",
                          "model.safetensors.index.json": "up_to_date"})
        # The failed verification dropped the file's record: plain runs no longer trust it.
        offline, summary = self.run_tool("--repo_id=org/model", "--assets=safetensors",
                                         "--offline")
        self.assertEqual(offline.returncode, 1)
        self.assertIn(f"--offline: {shard}: sha256 mismatch: expected ",
                      {f["path"]: f.get("error") for f in summary["files"]}[SHARD1])
        repaired, summary = self.run_tool("--repo_id=org/model", "--assets=config,safetensors")
        self.assertEqual(repaired.returncode, 0, repaired.stderr)
        self.assert_identical("model", [SHARD1])
        self.assertEqual([f["path"] for f in summary["files"] if f["status"] == "downloaded"],
                         [SHARD1])
        self.flip_byte_behind_mtime(shard)
        repaired, summary = self.run_tool("--repo_id=org/model", "--assets=config,safetensors",
                                          "--verify")
        self.assertEqual(repaired.returncode, 0, repaired.stderr)
        self.assert_identical("model", [SHARD1])
        self.assertEqual([f["path"] for f in summary["files"] if f["status"] == "downloaded"],
                         [SHARD1])

    def test_include_exclude_globs(self):
        self.serve()
        result, _ = self.run_tool("--repo_id=org/model", "--assets=config", "--include=*.md",
                                  "--exclude=generation_*")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.files_on_disk(), ["README.md", "config.json"])

    def test_a_glob_ending_in_a_slash_takes_the_folder(self):
        self.serve()
        result, summary = self.run_tool("--repo_id=org/model", "--include=original/,[^c]*.json")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(sorted(f["path"] for f in summary["files"]),
                         ["config.json", "original/tokenizer.model"])
        result, summary = self.run_tool("--repo_id=org/model", "--assets=all",
                                        "--exclude=*.safetensors,original/,*.json")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([f["path"] for f in summary["files"]], ["README.md"])

    def test_connection_dropped_mid_body_resumes_with_range(self):
        self.serve(drop_every=512 * 1024)
        result, summary = self.run_tool("--repo_id=org/model", "--assets=safetensors")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_identical("model", [SHARD1, SHARD2])
        ranges = [r["headers"].get("range") for r in self.hub.requests()
                  if r["server"] == "storage"]
        self.assertIn("bytes=524288-", ranges)
        self.assertGreaterEqual(sum(f["retries"] for f in summary["files"]), 9)
        self.assertEqual(summary["bytes_fetched"], (3 * MiB + 123) + (2 * MiB + 7) +
                         len(self.repo_bytes("model", "model.safetensors.index.json")))

    def test_server_error_bursts_are_retried(self):
        self.serve(listing_errors=[503, 500], errors={SHARD1: [500, 503, 503],
                                                      "config.json": [502]})
        result, summary = self.run_tool("--repo_id=org/model", "--assets=safetensors,config")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_identical("model", [SHARD1, SHARD2, "config.json"])
        self.assertIn("HTTP 503", result.stderr)
        self.assertIn("listing: retry 2: ", result.stderr)  # the listing's retries are shown too
        retries = {f["path"]: f["retries"] for f in summary["files"]}
        self.assertEqual(retries[SHARD1], 3)
        self.assertEqual(retries["config.json"], 1)

    def test_retry_after_of_429_and_503_is_waited_for(self):
        # --retry_max_ms=200 would retry within 0.2 s; the server asks for 1 s each time.
        self.serve(listing_errors=[503], errors={"config.json": [429]}, retry_after="1")
        result, _ = self.run_tool("--repo_id=org/model", "--assets=config",
                                  "--exclude=generation_config.json")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("waiting 1s as the server asks (Retry-After)", result.stderr)
        for marker in ("/api/models/", "/config.json"):
            times = [r["t"] for r in self.hub.requests() if marker in r["path"]]
            self.assertEqual(len(times), 2, marker)
            self.assertGreaterEqual(times[1] - times[0], 1.0, marker)

    def test_persistent_server_errors_fail_after_retries(self):
        self.serve(errors={"config.json": [503] * 20})
        result, summary = self.run_tool("--repo_id=org/model", "--assets=config",
                                        "--max_retries=3")
        self.assertEqual(result.returncode, 1)
        self.assertIn("gave up after 3 retries without progress", result.stderr)
        # The summary names the file once.
        self.assertIn("1 of 2 files failed; first: org/model@main: config.json: HTTP 503 from ",
                      summary["error"])
        self.assertNotIn("config.json", self.files_on_disk())
        self.assertEqual(summary["status"], "error")
        self.assertEqual(summary["files"][0]["retries"], 3)  # as many as the message says
        self.assertEqual(len([r for r in self.hub.requests() if r["path"].endswith("/config.json")]),
                         4)
        negative, _ = self.run_tool("--repo_id=org/model", "--assets=config", "--max_retries=-1")
        self.assertEqual(negative.returncode, 1)
        self.assertIn("--max_retries: expected 0 or more, got -1", negative.stderr)
        for flag, least in (("retry_base_ms", 0), ("retry_max_ms", 0), ("connect_timeout_s", 1),
                            ("stall_timeout_s", 1), ("max_workers", 1)):
            refused, _ = self.run_tool("--repo_id=org/model", "--assets=config", f"--{flag}=-1")
            self.assertEqual(refused.returncode, 1, flag)
            self.assertIn(f"--{flag}: expected {least} or more, got -1", refused.stderr)

    def test_slow_trickle_times_out_and_resumes(self):
        self.serve(trickle={SHARD2: 4})
        start = time.monotonic()
        result, summary = self.run_tool("--repo_id=org/model", "--assets=safetensors")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertLess(time.monotonic() - start, 4)  # gave up on the trickle, did not wait it out
        self.assert_identical("model", [SHARD1, SHARD2])
        retries = {f["path"]: f["retries"] for f in summary["files"]}
        self.assertEqual(retries[SHARD2], 1)

    def test_wrong_checksum_once_is_refetched(self):
        self.serve(corrupt={SHARD1: 1})
        result, _ = self.run_tool("--repo_id=org/model", "--assets=safetensors")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("sha256 mismatch", result.stderr)
        self.assert_identical("model", [SHARD1, SHARD2])

    def test_wrong_checksum_twice_fails_and_leaves_nothing(self):
        self.serve(corrupt={SHARD1: 2, "config.json": 2})
        result, _ = self.run_tool("--repo_id=org/model", "--assets=safetensors,config")
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"{SHARD1}: sha256 mismatch: expected", result.stderr)
        self.assertIn("config.json: git blob sha1 mismatch", result.stderr)
        # The summary names the file once.
        self.assertRegex(result.stderr, rf"2 of 5 files failed; first: ({SHARD1}: sha256|"
                                        r"config\.json: git blob sha1) mismatch")
        on_disk = self.files_on_disk()
        self.assertNotIn(SHARD1, on_disk)
        self.assertNotIn("config.json", on_disk)
        self.assertIn(SHARD2, on_disk)
        cache = os.path.join(self.local_dir, "model", ".cache", "download_assets")
        self.assertFalse(os.path.exists(os.path.join(cache, SHARD1 + ".part")))

    def test_part_file_from_earlier_run_is_resumed(self):
        self.serve()
        part = os.path.join(self.local_dir, "model", ".cache", "download_assets", SHARD1 + ".part")
        write(part, self.repo_bytes("model", SHARD1)[:MiB])
        result, summary = self.run_tool("--repo_id=org/model", "--assets=safetensors",
                                        "--exclude=" + SHARD2)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_identical("model", [SHARD1])
        self.assertIn({"range": f"bytes={MiB}-"},
                      [{"range": r["headers"].get("range")} for r in self.hub.requests()
                       if r["server"] == "storage"])
        shard = [f for f in summary["files"] if f["path"] == SHARD1][0]
        self.assertEqual(shard["bytes_fetched"], 2 * MiB + 123)

    def test_a_resume_answered_from_another_byte_is_written_from_there(self):
        part = os.path.join(self.local_dir, "model", ".cache", "download_assets", SHARD1 + ".part")
        size = 3 * MiB + 123
        # (config, storage requests' Range headers, bytes fetched); the part file holds 1 MiB.
        for config, ranges, fetched in [
                ({"range_start": {SHARD1: 0}}, [f"bytes={MiB}-"], size),
                ({"range_start": {SHARD1: MiB // 2}}, [f"bytes={MiB}-"], size - MiB // 2),
                ({"ignore_range": [SHARD1]}, [f"bytes={MiB}-"], size),
                # The sha256 comes from the ETag, learned with the reply's headers.
                ({"ignore_range": [SHARD1], "no_digest": [SHARD1]}, [f"bytes={MiB}-"], size),
                ({"range_start": {SHARD1: MiB // 2}, "no_digest": [SHARD1]}, [f"bytes={MiB}-"],
                 size - MiB // 2),
                # A gap before the served bytes: start over without Range.
                ({"range_start": {SHARD1: 2 * MiB}}, [f"bytes={MiB}-", None], size)]:
            with self.subTest(config=config):
                shutil.rmtree(self.local_dir, ignore_errors=True)
                write(part, self.repo_bytes("model", SHARD1)[:MiB])
                self.serve(**config)
                result, summary = self.run_tool("--repo_id=org/model", f"--include={SHARD1}",
                                                "--max_retries=1")
                self.hub.stop()
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assert_identical("model", [SHARD1])
                self.assertEqual([r["headers"].get("range") for r in self.hub.requests()
                                  if r["server"] == "storage"], ranges)
                self.assertEqual(summary["files"][0]["bytes_fetched"], fetched)
                self.assertNotIn("mismatch", result.stderr)

    def test_the_final_check_is_about_the_part_file_on_disk(self):
        # Something else changes the part file while a resumed transfer appends to it: the bytes
        # received still add up to the listed size and sha256, the file on disk does not. The
        # next write sees it (the file is not as the last one left it).
        part = os.path.join(self.local_dir, "model", ".cache", "download_assets", SHARD1 + ".part")
        for how, note in [
                ("append", f"the part file changed size ({2 * MiB} bytes, now {2 * MiB + 100}) "
                           "during the download"),
                ("truncate", f"the part file changed size ({2 * MiB} bytes, now 0) during the "
                             "download"),
                ("replace", "the part file was replaced or deleted during the download"),
                ("rewrite", "the part file was rewritten in place (its ctime or mtime moved) "
                            "during the download")]:
            with self.subTest(how=how):
                shutil.rmtree(self.local_dir, ignore_errors=True)
                write(part, self.repo_bytes("model", SHARD1)[:MiB])
                self.serve(tamper={SHARD1: [part, how]})
                result, summary = self.run_tool("--repo_id=org/model", f"--include={SHARD1}")
                self.hub.stop()
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn(f"{SHARD1}: {part}: {note}; deleted the part file", result.stderr)
                self.assert_identical("model", [SHARD1])
                self.assertEqual(summary["files"][0]["retries"], 1)

    def test_a_same_size_rewrite_of_the_part_file_is_caught(self):
        # Another process overwrites the part file's bytes in place mid-transfer: size and inode
        # stay, the bytes streamed still hash to the listed sha256, the file on disk does not.
        part = os.path.join(self.local_dir, "model", ".cache", "download_assets", SHARD1 + ".part")
        # (fake_hub config besides the tamper, what stderr says once the file is in place)
        for config, done in [({}, f"{SHARD1}: done, verified"),
                             ({"no_digest": [SHARD1], "no_etag": [SHARD1]},
                              f"{SHARD1}: done, NOT verified")]:
            with self.subTest(config=config):
                shutil.rmtree(self.local_dir, ignore_errors=True)
                write(part, self.repo_bytes("model", SHARD1)[:MiB])
                self.serve(tamper={SHARD1: [part, "rewrite"]}, **config)
                result, summary = self.run_tool("--repo_id=org/model", f"--include={SHARD1}",
                                                "--progress=plain")
                self.hub.stop()
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn(f"{SHARD1}: {part}: the part file was rewritten in place (its ctime "
                              "or mtime moved) during the download; deleted the part file",
                              result.stderr)
                self.assertIn(done, result.stderr)
                self.assert_identical("model", [SHARD1])
                self.assertEqual(summary["files"][0]["retries"], 1)

    def test_a_part_file_rewritten_between_two_attempts_is_caught(self):
        # The connection drops at 2 MiB; during the backoff that follows another process rewrites
        # the part file in place. The digest so far hashed the bytes received, not these.
        part = os.path.join(self.local_dir, "model", ".cache", "download_assets", SHARD1 + ".part")
        write(part, self.repo_bytes("model", SHARD1)[:MiB])
        self.serve(drop_every=2 * MiB, tamper={SHARD1: [part, "rewrite", "after_cut"]})
        result, summary = self.run_tool("--repo_id=org/model", f"--include={SHARD1}",
                                        "--retry_base_ms=1000", "--retry_max_ms=1000")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"{SHARD1}: {part}: the part file was rewritten in place (its ctime or "
                      "mtime moved) between two attempts; deleted the part file", result.stderr)
        self.assert_identical("model", [SHARD1])
        # The cut, the rewrite, and the cut of the download started over, at 2 MiB again.
        self.assertEqual(summary["files"][0]["retries"], 3, result.stderr)

    def test_an_lfs_entry_without_a_usable_sha256_is_checked_by_what_there_is(self):
        sha256 = hashlib.sha256(self.repo_bytes("model", SHARD1)).hexdigest()
        unverified = (f"{SHARD1}: not verified: neither the listing nor the server gives a sha256 "
                      "or git blob id for it; only its size was checked")
        # (the listing's "lfs" fields, whether responses carry the sha256 ETag, what stderr says)
        for fields, etag, said in [
                # Its blobId names the LFS pointer, not the content: the ETag's sha256 checks it.
                ({"sha256": None}, True, f"{SHARD1}: done, verified"),
                ({"sha256": "not hex"}, True, f"{SHARD1}: done, verified"),
                # "oid" as the Hub's tree listing spells it, bare or as in a pointer file.
                ({"sha256": None, "oid": sha256}, False, f"{SHARD1}: done, verified"),
                ({"sha256": None, "oid": "sha256:" + sha256.upper()}, False,
                 f"{SHARD1}: done, verified"),
                ({"sha256": None}, False, unverified)]:
            with self.subTest(fields=fields, etag=etag):
                shutil.rmtree(self.local_dir, ignore_errors=True)
                self.serve(lfs_fields={SHARD1: fields}, no_etag=[] if etag else [SHARD1])
                result, summary = self.run_tool("--repo_id=org/model", f"--include={SHARD1}",
                                                "--progress=plain")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn(said, result.stderr)
                self.assertNotIn("mismatch", result.stderr)
                self.assert_identical("model", [SHARD1])
                self.assertEqual(summary["files"][0].get("warning") is not None, said == unverified)
                # --verify checks it by the sha256 it was verified with, the ETag's included.
                self.flip_byte_behind_mtime(os.path.join(self.local_dir, "model", SHARD1))
                checked, _ = self.run_tool("--repo_id=org/model", f"--include={SHARD1}",
                                           "--verify")
                self.hub.stop()
                self.assertEqual(checked.returncode, 0, checked.stderr)
                cannot_verify = (f"{SHARD1}: not verified: neither the listing nor its record "
                                 "gives a sha256 or git blob id for --verify to hash it by; only "
                                 "its size was checked")
                if said == unverified:
                    self.assertIn(unverified[len(SHARD1) + 2:], summary["files"][0]["warning"])
                    self.assertIn(cannot_verify, checked.stderr)
                else:
                    self.assertNotIn(cannot_verify, checked.stderr)
                    self.assertIn(f"{SHARD1}: the file on disk does not verify: sha256 expected "
                                  f"{sha256}", checked.stderr)
                    self.assert_identical("model", [SHARD1])
        # The oid is used, not just accepted: a wrong one fails as a sha256 mismatch.
        shutil.rmtree(self.local_dir, ignore_errors=True)
        self.serve(lfs_fields={SHARD1: {"sha256": None, "oid": "0" * 64}}, no_etag=[SHARD1])
        result, _ = self.run_tool("--repo_id=org/model", f"--include={SHARD1}")
        self.hub.stop()
        self.hub = None
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"{SHARD1}: sha256 mismatch: expected {'0' * 64}", result.stderr)

    def test_a_file_that_cannot_be_verified_says_so_whatever_the_progress(self):
        self.serve(no_digest=[SHARD1], no_etag=[SHARD1])
        downloaded = (f"{SHARD1}: not verified: neither the listing nor the server gives a sha256 "
                      "or git blob id for it; only its size was checked")
        cannot_verify = (f"{SHARD1}: not verified: neither the listing nor its record gives a "
                         "sha256 or git blob id for --verify to hash it by; only its size was "
                         "checked")
        for args, said in [([], downloaded), ([], None), (["--verify"], cannot_verify),
                           (["--verify", "--offline"], cannot_verify)]:
            with self.subTest(args=args):
                result, summary = self.run_tool("--repo_id=org/model", f"--include={SHARD1}",
                                                "--progress=none", *args)
                self.assertEqual(result.returncode, 0, result.stderr)
                if said is None:  # an unchanged file is taken on its size silently
                    self.assertNotIn("not verified", result.stderr)
                    self.assertNotIn("warning", summary["files"][0])
                else:
                    self.assertIn(said + "\n", result.stderr)
                    self.assertEqual(summary["files"][0]["warning"], said[len(SHARD1) + 2:])

    def test_an_lfs_file_served_without_a_redirect_is_checked_by_its_x_linked_etag(self):
        # A mirror may answer /resolve/ with the LFS file itself, X-Linked-Etag on that reply.
        sha256 = hashlib.sha256(self.repo_bytes("model", SHARD1)).hexdigest()
        config = {"lfs_fields": {SHARD1: {"sha256": None}}, "no_redirect": [SHARD1]}
        self.serve(**config)
        result, summary = self.run_tool("--repo_id=org/model", f"--include={SHARD1}",
                                        "--progress=plain")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([r for r in self.hub.requests() if r["server"] == "storage"], [])
        self.assertIn(f"{SHARD1}: done, verified", result.stderr)
        self.assertNotIn("warning", summary["files"][0])
        self.assert_identical("model", [SHARD1])
        self.hub.stop()
        shutil.rmtree(self.local_dir)
        # A wrong byte fails as it does behind a 302 (every response: a stalled one under load
        # uses one up too).
        self.serve(corrupt={SHARD1: 100}, **config)
        result, summary = self.run_tool("--repo_id=org/model", f"--include={SHARD1}")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn(f"sha256 mismatch: expected {sha256}", summary["files"][0]["error"])
        self.assertFalse(os.path.exists(os.path.join(self.local_dir, "model", SHARD1)))

    def test_part_file_of_another_version_starts_over(self):
        root = tempfile.mkdtemp(dir=self.workdir)
        shard = os.path.join(root, "org", "model", SHARD1)
        write(shard, random.Random(1).randbytes(2 * MiB))
        self.hub = FakeHub(root, {"drop_every": 512 * 1024})
        cut, _ = self.run_tool("--repo_id=org/model", f"--include={SHARD1}", "--max_retries=0")
        self.assertEqual(cut.returncode, 1, cut.stderr)
        part = os.path.join(self.local_dir, "model", ".cache", "download_assets", SHARD1 + ".part")
        self.assertEqual(os.path.getsize(part), 512 * 1024)
        self.hub.stop()
        write(shard, random.Random(2).randbytes(2 * MiB))  # a new commit: same size, new content
        self.hub = FakeHub(root, {})
        result, summary = self.run_tool("--repo_id=org/model", f"--include={SHARD1}")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"{SHARD1}: the part file holds another version of the file; starting over",
                      result.stderr)
        self.assertNotIn("mismatch", result.stderr)  # not resumed, hashed and fetched again
        self.assertEqual([r["headers"].get("range") for r in self.hub.requests()
                          if r["server"] == "storage"], [None])
        self.assertEqual(summary["files"][0]["bytes_fetched"], 2 * MiB)
        with open(os.path.join(self.local_dir, "model", SHARD1), "rb") as f:
            self.assertEqual(f.read(), random.Random(2).randbytes(2 * MiB))
        self.assertFalse(os.path.exists(part + ".json"))  # no record outlives its part file

    def test_listing_larger_than_the_served_file_is_a_size_mismatch(self):
        config_size = len(self.repo_bytes("model", "config.json"))
        shard_size = 2 * MiB + 7
        self.serve(list_size={"config.json": config_size + 2, SHARD2: shard_size + 2})
        result, summary = self.run_tool("--repo_id=org/model", "--assets=config,safetensors",
                                        f"--exclude={SHARD1},generation_config.json",
                                        "--max_retries=2")
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"size mismatch: the listing says {config_size + 2} bytes, the server has "
                      f"{config_size}", result.stderr)
        errors = {f["path"]: f.get("error", "") for f in summary["files"]}
        self.assertEqual(errors[SHARD2], f"size mismatch: the listing says {shard_size + 2} "
                         f"bytes, the server has {shard_size}")
        for path in ("config.json", SHARD2):  # one request each: a retry cannot change the sizes
            self.assertEqual(len([r for r in self.hub.requests() if path in r["path"]]),
                             1 if path == "config.json" else 2, path)  # the shard: 302 + storage

        # A part file holding the whole served file meets a 416 "bytes */SIZE".
        part = os.path.join(self.local_dir, "model", ".cache", "download_assets",
                            "config.json.part")
        write(part, self.repo_bytes("model", "config.json"))
        resumed, _ = self.run_tool("--repo_id=org/model", "--assets=config",
                                   "--exclude=generation_config.json", "--max_retries=2")
        self.assertEqual(resumed.returncode, 1)
        self.assertIn(f"the listing says {config_size + 2} bytes, the server has {config_size}",
                      resumed.stderr)
        self.assertIn(f"bytes={config_size}-", [r["headers"].get("range")
                                                for r in self.hub.requests()])

    def test_transfers_cut_at_one_byte_give_up_after_max_retries(self):
        # Without size headers the client only sees each transfer end early and a 416 past it.
        config_size = len(self.repo_bytes("model", "config.json"))
        self.serve(list_size={"config.json": config_size + 2}, no_size_headers=["config.json"])
        result, summary = self.run_tool("--repo_id=org/model", "--assets=config",
                                        "--exclude=generation_config.json", "--max_retries=2")
        self.assertEqual(result.returncode, 1)
        self.assertIn("gave up after 2 retries without progress", result.stderr)
        self.assertEqual(summary["files"][0]["retries"], 2)
        self.assertEqual(len([r for r in self.hub.requests() if r["path"].endswith("config.json")]),
                         3)  # GET, Range -> 416, GET again: no byte beyond the first transfer's

    def test_second_run_into_the_same_folder_is_refused_while_the_first_holds_it(self):
        self.serve()
        state = os.path.join(self.local_dir, "model", ".cache", "download_assets")
        os.makedirs(state)
        with open(os.path.join(state, ".titan.lock"), "w") as holder:
            fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a first run would
            holder.write("4242\n")
            holder.flush()
            result, summary = self.run_tool("--repo_id=org/model", "--assets=config")
            self.assertEqual(result.returncode, 1)
            self.assertIn("another download_assets is using " +
                          os.path.join(self.local_dir, "model"), result.stderr)
            self.assertIn("(pid 4242)", result.stderr)
            self.assertEqual(summary["status"], "error")
            self.assertEqual(self.hub.requests(), [])  # stopped before the listing
        after, _ = self.run_tool("--repo_id=org/model", "--assets=config")
        self.assertEqual(after.returncode, 0, after.stderr)

    def test_a_folder_holding_another_repo_of_the_same_name_is_refused(self):
        self.serve()
        first, _ = self.run_tool("--repo_id=org/model", "--assets=config")
        self.assertEqual(first.returncode, 0, first.stderr)
        folder = os.path.join(self.local_dir, "model")
        listing = os.path.join(folder, ".cache", "download_assets", "revisions", "main.json")
        refusal = (f"{folder} holds the files of org/model (its saved listing {listing} says so), "
                   "not of other/model; pass another --local_dir for other/model")
        for args in ([], ["--offline", "--verify"], ["--offline"]):
            refused, summary = self.run_tool("--repo_id=other/model", "--assets=config", *args)
            self.assertEqual(refused.returncode, 1, args)
            self.assertIn(refusal, refused.stderr, args)
            self.assertEqual(summary["files"], [], args)
        self.assertEqual([r for r in self.hub.requests() if "/other/model/resolve/" in r["path"]],
                         [])
        self.assert_identical("model", ["config.json"])
        with open(listing) as f:
            self.assertEqual(json.load(f)["id"], "org/model")
        ok, _ = self.run_tool("--repo_id=org/model", "--assets=config", "--offline", "--verify")
        self.assertEqual(ok.returncode, 0, ok.stderr)
        elsewhere = os.path.join(self.workdir, "other")
        moved, _ = self.run_tool("--repo_id=other/model", "--assets=config",
                                 f"--local_dir={elsewhere}")
        self.assertEqual(moved.returncode, 0, moved.stderr)
        with open(os.path.join(elsewhere, "model", "config.json"), "rb") as f:
            self.assertEqual(f.read(), b'{"dim": 32}')
        # A listing saved by an older download_assets, without an id, is accepted as before.
        with open(listing) as f:
            saved = json.load(f)
        del saved["id"]
        with open(listing, "w") as f:
            json.dump(saved, f)
        old, _ = self.run_tool("--repo_id=org/model", "--assets=config", "--offline")
        self.assertEqual(old.returncode, 0, old.stderr)

    def test_a_renamed_repo_stays_its_folders_repo_offline(self):
        # The Hub answers a renamed repo's old id with its new one: the folder that --repo_id filled
        # is still its own for --offline, which asks no Hub.
        self.serve()
        with urllib.request.urlopen(
                f"{self.hub.endpoint}/api/models/org/model/revision/main?blobs=true") as answer:
            renamed = json.load(answer)
        self.hub.stop()
        renamed["id"] = "neworg/model"
        self.serve(listing_body=json.dumps(renamed))
        for args in ([], [], ["--offline"], ["--offline", "--verify"]):
            result, _ = self.run_tool("--repo_id=org/model", "--assets=config", *args)
            self.assertEqual(result.returncode, 0, (args, result.stderr))
        # Another repo of the NAME is still refused.
        other, _ = self.run_tool("--repo_id=other/model", "--assets=config", "--offline")
        self.assertEqual(other.returncode, 1)
        self.assertIn("holds the files of neworg/model", other.stderr)

    def test_gated_repo_without_token_says_how_to_get_access(self):
        self.serve()
        result, _ = self.run_tool("--repo_id=org/gated", "--assets=tokenizer")
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"request access at {self.hub.endpoint}/org/gated and pass --hf_token",
                      result.stderr)
        wrong, _ = self.run_tool("--repo_id=org/gated", "--assets=tokenizer",
                                 "--hf_token=hf_wrong")
        self.assertEqual(wrong.returncode, 1)
        self.assertIn("HTTP 403", wrong.stderr)
        self.assertIn("the token you passed has no access", wrong.stderr)

    def test_token_goes_only_to_hub_and_never_appears_in_output_or_files(self):
        self.serve(drop_every=32 * 1024, corrupt={"original/tokenizer.model": 1})
        runs = [self.run_tool("--repo_id=org/gated", "--assets=tokenizer,config",
                              token_env=True)]
        shutil.rmtree(self.local_dir)
        runs.append(self.run_tool("--repo_id=org/gated", "--assets=tokenizer,config",
                                  f"--hf_token={TOKEN}", "--progress=bars"))
        runs.append(self.run_tool("--repo_id=org/nope", "--assets=tokenizer", token_env=True))
        for result, _ in runs[:2]:
            self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_identical("gated", ["config.json", "tokenizer.json",
                                        "original/tokenizer.model"])
        for result, _ in runs:
            self.assertNotIn(TOKEN, result.stdout)
            self.assertNotIn(TOKEN, result.stderr)
        for dirpath, _, filenames in os.walk(self.workdir):
            for name in filenames:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as f:
                    self.assertNotIn(TOKEN.encode(), f.read(), path)
        requests = self.hub.requests()
        hub_auth = {r["headers"].get("authorization") for r in requests if r["server"] == "hub"}
        self.assertIn(f"Bearer {TOKEN}", hub_auth)
        storage = [r for r in requests if r["server"] == "storage"]
        self.assertGreater(len(storage), 2)
        for request in storage:
            self.assertNotIn("authorization", request["headers"])

    def test_token_with_line_break_is_refused_before_any_request(self):
        self.serve()
        injected = "hf_SECRETX\r\nX-Evil: 1"
        token_file = os.path.join(self.workdir, "token")
        write(token_file, (injected + "\n").encode())
        for args, env, source in [([f"--hf_token={injected}"], {}, "--hf_token"),
                                  (["--hf_token=\u00a0hf_SECRETX"], {}, "--hf_token"),  # NBSP
                                  ([], {"HF_TOKEN": injected}, "$HF_TOKEN"),
                                  ([], {"HF_TOKEN_PATH": token_file}, token_file)]:
            result, _ = self.run_tool("--repo_id=org/model", "--include=config.json", *args,
                                      env=env)
            self.assertEqual(result.returncode, 1, result.stderr)
            self.assertIn(f"{source}: the Hub token has whitespace, a control character or a "
                          "non-ASCII byte", result.stderr)
            self.assertNotIn("SECRETX", result.stderr + result.stdout)
        self.assertEqual(self.hub.requests(), [])

    def test_not_found_names_repo_revision_or_file(self):
        self.serve(missing=["generation_config.json"])
        repo, _ = self.run_tool("--repo_id=org/nope", "--assets=config")
        self.assertEqual(repo.returncode, 1)
        self.assertIn('repository "org/nope" not found', repo.stderr)
        self.assertFalse(os.path.exists(self.local_dir))  # the folders it made are taken back
        revision, _ = self.run_tool("--repo_id=org/model", "--assets=config", "--revision=v9")
        self.assertEqual(revision.returncode, 1)
        self.assertIn('revision "v9" not found in org/model', revision.stderr)
        entry, summary = self.run_tool("--repo_id=org/model", "--assets=config")
        self.assertEqual(entry.returncode, 1)
        self.assertIn('file "generation_config.json" not found at revision main', entry.stderr)
        self.assertEqual({f["path"]: f["status"] for f in summary["files"]},
                         {"config.json": "downloaded", "generation_config.json": "failed"})

    def test_credentials_in_hf_endpoint_are_never_printed(self):
        self.serve(listing_errors=[503])
        secret = "S3cretPass"
        with_userinfo = self.hub.endpoint.replace("http://", f"http://alice:{secret}@")
        unreachable = f"http://alice:{secret}@127.0.0.1:9"
        runs = [
            (with_userinfo, "--repo_id=org/model", "HTTP 503 from http://***@127.0.0.1:"),
            (with_userinfo, "--repo_id=org/nosuch", "not found at http://***@127.0.0.1:"),
            (unreachable, "--repo_id=org/model", "http://***@127.0.0.1:9/api/models/"),
        ]
        for endpoint, repo, expected in runs:
            result, _ = self.run_tool(repo, "--assets=config", "--max_retries=1",
                                      env={"HF_ENDPOINT": endpoint})
            self.assertIn(expected, result.stderr + result.stdout)
            self.assertNotIn(secret, result.stderr + result.stdout)
            self.assertNotIn("alice", result.stderr + result.stdout)
        self.hub.stop()
        self.serve(listing_body="<html>maintenance</html>")  # the listing's URL names the input
        not_json, _ = self.run_tool("--repo_id=org/model", "--assets=config",
                                    env={"HF_ENDPOINT": self.hub.endpoint.replace(
                                        "http://", f"http://alice:{secret}@")})
        self.assertIn("http://***@127.0.0.1:", not_json.stderr)
        self.assertNotIn(secret, not_json.stderr + not_json.stdout)

    def test_an_hf_endpoint_without_a_scheme_is_refused(self):
        # Nothing would compare as its origin: a gated repo would get no token and blame the token.
        self.serve()
        bare = self.hub.endpoint.removeprefix("http://")
        result, summary = self.run_tool("--repo_id=org/gated", "--assets=config", token_env=True,
                                        env={"HF_ENDPOINT": bare})
        self.assertEqual(result.returncode, 1)
        error = ("$HF_ENDPOINT: expected a URL starting with http:// or https:// (as "
                 f'https://huggingface.co), got "{bare}"')
        self.assertIn(error, result.stderr)
        self.assertEqual(summary["error"], error)
        self.assertEqual(self.hub.requests(), [])
        self.assertFalse(os.path.exists(self.local_dir))

    def test_an_index_that_is_not_json_says_so_with_the_parsers_position(self):
        self.serve()
        result, _ = self.run_tool("--repo_id=org/bad_index", "--assets=safetensors")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn("model.safetensors.index.json: invalid JSON: "
                      "[json.exception.parse_error.101] parse error at line 1, column 64: "
                      "syntax error", result.stderr)

    def test_listing_that_is_not_json_names_the_url_and_is_not_kept(self):
        self.serve(listing_body="<html>maintenance</html>")
        result, summary = self.run_tool("--repo_id=org/model", "--assets=config")
        self.assertEqual(result.returncode, 1)
        self.assertIn("/api/models/org/model/revision/main?blobs=true: expected a JSON object", result.stderr)
        self.assertEqual(summary["status"], "error")
        # Nothing for a later --offline run to trust: the folders the run made are taken back.
        self.assertFalse(os.path.exists(self.local_dir))

    def test_unsafe_remote_names_are_refused(self):
        for name in ["../escape.txt", "/etc/passwd", "a/../../escape.txt"]:
            self.serve(extra_siblings={"org/evil": [name]})
            result, _ = self.run_tool("--repo_id=org/evil", "--assets=all")
            self.assertEqual(result.returncode, 1)
            self.assertIn("refusing remote file name", result.stderr)
            self.assertFalse(os.path.exists(os.path.join(self.local_dir, "escape.txt")))
            self.assertFalse(os.path.exists(os.path.join(self.workdir, "escape.txt")))
            self.hub.stop()
            self.hub = None

    def test_a_file_listed_twice_is_refused_before_any_download(self):
        self.serve(extra_siblings={"org/model": ["config.json"]})
        result, summary = self.run_tool("--repo_id=org/model", "--assets=all")
        self.assertEqual(result.returncode, 1)
        self.assertIn('refusing remote file name "config.json": listed twice', result.stderr)
        self.assertEqual(summary["files"], [])
        self.assertEqual([r for r in self.hub.requests() if "/resolve/" in r["path"]], [])

    def test_repo_files_in_the_tool_state_folder_are_refused(self):
        self.serve()
        result, _ = self.run_tool("--repo_id=org/clash", "--assets=all")
        self.assertEqual(result.returncode, 1)
        self.assertIn('repo file ".cache/download_assets/config.json.meta.json" would land in '
                      "download_assets' own state folder .cache/download_assets; leave it out "
                      "with --exclude='.cache/download_assets/*'", result.stderr)
        self.assertEqual(self.files_on_disk("clash"), [])
        result, _ = self.run_tool("--repo_id=org/clash", "--assets=all",
                                  "--exclude=.cache/download_assets/*")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_identical("clash", ["config.json"])
        meta = os.path.join(self.local_dir, "clash", ".cache", "download_assets",
                            "config.json.meta.json")
        with open(meta) as f:
            self.assertEqual(json.load(f)["path"], "config.json")  # the tool's own sidecar
        # A file named like the state folder's ancestor would keep the folder from being made.
        result, _ = self.run_tool("--repo_id=org/dot_cache", "--assets=all")
        self.assertEqual(result.returncode, 1)
        self.assertIn('repo file ".cache" would land in download_assets\' own state folder '
                      ".cache/download_assets; leave it out with --exclude='.cache'",
                      result.stderr)
        result, _ = self.run_tool("--repo_id=org/dot_cache", "--assets=all", "--exclude=.cache")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_identical("dot_cache", ["config.json"])

    def test_usage_errors(self):
        # Exit 1, as every tool's usage errors and download_assets' other failures; with --json
        # (which run_tool passes) the error is JSON on stdout too.
        self.serve()
        for args, error in [(["--repo_id=org/model"], "say what to fetch"),
                            (["--repo_id=org/model", "--assets=weights"],
                             'unknown asset "weights"'),
                            (["--assets=config"], "--repo_id=ORG/NAME is required"),
                            (["--repo_id=ab", "--assets=config"], '"ab"'),
                            (["--repo_id=org/model", "--assets=config", "--local_dir="],
                             "--local_dir: expected a folder, got an empty string"),
                            (["--repo_id=org/model", "--assets=config", "--revision="],
                             "--revision: expected a branch, tag or commit, got an empty string"),
                            # A dot-segment in the URL would fetch the default branch.
                            (["--repo_id=org/model", "--assets=config", "--revision=.."],
                             '--revision: expected a branch, tag or commit, got "..": a git ref '
                             'has no empty, "." or ".." path component'),
                            (["--repo_id=org/model", "--assets=config", "--revision=refs/pr/."],
                             'got "refs/pr/.": a git ref has no empty'),
                            (["--repo_id=foo/.cache", "--assets=config"],
                             "neither starting nor ending with '-' or '.'"),
                            (["--repo_id=foo/-bar", "--assets=config"],
                             "neither starting nor ending with '-' or '.'"),
                            (["--repo_id=org/model", "--assets=config", "--retry_base_ms=5000",
                              "--retry_max_ms=1000"],
                             "--retry_base_ms=5000 is longer than --retry_max_ms=1000: the first "
                             "retry delay cannot exceed the longest; lower --retry_base_ms or "
                             "raise --retry_max_ms"),
                            # Refused before the listing is fetched (with a bad token, before
                            # the Hub's auth error); "\udcff" is the byte 0xff in argv.
                            (["--repo_id=org/gated", "--hf_token=hf_wrong", "--include=a\udcff"],
                             '--include: glob "a\\xff"'),
                            (["--repo_id=org/model", "--assets=config", "--exclude=\udcfe*"],
                             '--exclude: glob "\\xfe*"'),
                            # The offset counts the glob's bytes, not its regex's (".*\\/").
                            (["--repo_id=org/model", "--include=**/\udcff"],
                             '--include: glob "**/\\xff": UTF-8 error: illegal byte (0xfe or '
                             '0xff) at byte offset 3 of the glob')]:
            result, summary = self.run_tool(*args)
            self.assertEqual(result.returncode, 1, args)
            self.assertIn(error, result.stderr, args)
            # One spelling, the usage's and the download's: "download_assets: <message>".
            self.assertNotIn("download_assets: error:", result.stderr, args)
            self.assertIn(error, summary["error"], args)
        self.assertFalse(os.path.exists(self.local_dir))  # refused before any folder is made
        self.assertEqual(self.hub.requests(), [])
        result = subprocess.run([BINARY, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("  --repo_id (Hub repo as ORG/NAME", result.stdout)
        self.assertNotIn("flagfile", result.stdout)  # gflags' own flags stay out


if __name__ == "__main__":
    BINARY, FAKE_HUB = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=sys.argv[:1], verbosity=2)
