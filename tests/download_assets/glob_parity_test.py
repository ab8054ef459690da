"""--include/--exclude select the files huggingface_hub's filter_repo_objects does (Python fnmatch).

Usage: python3 glob_parity_test.py <select_files binary>
"""

import json
import random
import subprocess
import sys
import unittest

from huggingface_hub.utils import filter_repo_objects

SELECT_FILES = None

# The Hub lists no path with a "\\" (download_assets refuses one).
PATHS = ["config.json", "Config.json", "generation_config.json", "tokenizer.json", "^x.json",
         "original/params.json", "original/tokenizer.model", "original/sub/x.pth", "original",
         "model-00001-of-00002.safetensors", "model.safetensors.index.json", "README.md",
         "a", "b", "-", "!", "^", "[", "]", "[a]", "a]", "*", "?", ".hidden", "dir/.hidden",
         "é", "Éé.json", "a|b&&c", "x~~y", "sp ace", "日本/語.txt", "a-b", "{x}"]

PATTERNS = ["original/", "original", "original/*", "*", "*.json", "*.JSON", "[^c]*.json",
            "[!c]*.json", "\\*.json", "original\\", "original\\*", "*/", "[a-c]", "[c-a]",
            "[!c-a]", "[!]", "[!]]", "[]]", "[]a]", "[!]a]", "[", "[a", "a]", "[[:alpha:]]",
            "[a-c-e]", "[a--]", "[--a]", "[-a]", "[a-]", "[!-a]", "[b-ac-d]", "[!y-xb-a]",
            "[\\]", "[\\-a]", "[^]", "[^a]", "?", "??", "*?*", "**", "*a*", "a|b&&c",
            "x~~y", "[&~|]*", "sp ace", "*.md", "?é*", "[é-ë]", "日本/*", "*/語.txt",
            "{x}", "(?s)*", ".*", "$", "^*", "[.]*", "model-*-of-*.safetensors", "*index*"]


def hub_selects(paths, include, exclude, everything):
    # download_assets takes --include'd files on top of --assets; with all, every file.
    allow = None if everything else include
    return list(filter_repo_objects(paths, allow_patterns=allow, ignore_patterns=exclude or None))


def random_glob(rng, alphabet, size):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, size)))


class GlobParityTest(unittest.TestCase):
    def check(self, cases):
        result = subprocess.run([SELECT_FILES], input=json.dumps(cases), capture_output=True,
                                text=True)
        self.assertEqual(result.returncode, 0, result.stderr)
        for case, kept in zip(cases, json.loads(result.stdout)):
            expected = hub_selects(case["paths"], case["include"], case["exclude"], case["all"])
            self.assertEqual(kept, expected, case)

    def test_each_glob_as_include_and_as_exclude(self):
        cases = []
        for pattern in PATTERNS:
            cases.append({"all": False, "include": [pattern], "exclude": [], "paths": PATHS})
            cases.append({"all": True, "include": [], "exclude": [pattern], "paths": PATHS})
        cases.append({"all": False, "include": ["*.json", "original/"],
                      "exclude": ["*.safetensors", "original/"], "paths": PATHS})
        self.check(cases)

    def test_random_globs(self):
        rng = random.Random(20261207)
        alphabet = list("ab-!^[]*?/\\.é|")
        path_alphabet = list("ab-!^[]*?/.é|")
        cases = []
        for _ in range(3000):
            paths = [random_glob(rng, path_alphabet, 5) for _ in range(8)]
            cases.append({"all": rng.random() < 0.5, "include": [random_glob(rng, alphabet, 7)],
                          "exclude": [random_glob(rng, alphabet, 7)], "paths": paths})
        self.check(cases)


if __name__ == "__main__":
    SELECT_FILES = sys.argv.pop(1)
    unittest.main()
