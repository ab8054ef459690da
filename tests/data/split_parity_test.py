"""titan's split of a dataset folder against Hugging Face datasets' data_files resolution.

torchtitan loads load_dataset(path, split="train") to train and split="validation" to validate:
titan must read the same files of a folder, except that a folder whose names mark no split is read
whole for validation too (HF calls it all "train")."""
import argparse
import os
import subprocess
import sys
import tempfile
import unittest

os.environ["HF_DATASETS_OFFLINE"] = "1"
from datasets.data_files import DataFilesDict, get_data_patterns  # noqa: E402

LIST_SPLIT_MAIN = None

LAYOUTS = {
    "default_corpus": ["train.jsonl", "validation.jsonl"],
    "c4_en": ["c4-train.00000-of-00002.json.gz", "c4-train.00001-of-00002.json.gz",
              "c4-validation.00000-of-00001.json.gz"],
    "hub_train_test": ["train-00000-of-00002.jsonl", "train-00001-of-00002.jsonl",
                       "test-00000-of-00001.jsonl"],
    "pycache": ["a.jsonl", "_keep/z.jsonl", "__pycache__/z.jsonl"],
    "synonyms": ["other.jsonl", "sub/dev.jsonl", "sub/en_val.json", "train1.jsonl",
                 "training set.jsonl", "x-eval-y.jsonl"],
    "no_split": ["Train.jsonl", "mytrain.jsonl", "trainx.jsonl", "validations.jsonl", "a.jsonl"],
    "folders": ["train-test.jsonl", "train/x.jsonl", "valid/y.jsonl", "x/c4-val/z.jsonl"],
    "folder_only_val": ["my train.jsonl", "val/e.jsonl"],
    "sharded": ["data/dev-00000-of-00001.jsonl", "data/train-00000-of-00001.jsonl",
                "data/validation-00000-of-00001.jsonl", "data/x/train-00000-of-00001.jsonl",
                "z.jsonl"],
    "sharded_dots": ["data/a.b-00000-of-00001.jsonl", "data/train-00000-of-00001.jsonl",
                     "data/validation-00000-of-00001", "data/validation.jsonl"],
}
# Shard names whose split Hugging Face datasets refuses.
REFUSED_LAYOUTS = {
    "space": ["data/train-00000-of-00001.jsonl", "data/my train-00000-of-00001.jsonl"],
    "empty": ["data/-00000-of-00001.jsonl"],
    "twice": ["data/train-00000-of-00001.jsonl", "data/train-00000-of-00001-00000-of-00001.jsonl"],
}


def make_folder(folder, files):
    for file in files:
        path = os.path.join(folder, file)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write('{"text": "x"}\n')
            f.write('{"text": "x"}\n')


def hf_splits(folder):
    patterns = get_data_patterns(folder)
    files = DataFilesDict.from_patterns(patterns, base_path=folder)
    return patterns, {split: sorted(os.path.relpath(f, folder) for f in names)
                      for split, names in files.items()}


def titan_files(folder, split):
    out = subprocess.run([LIST_SPLIT_MAIN, folder, split], check=True, capture_output=True,
                         text=True).stdout.split("\n")
    lines = [line for line in out if line]
    if lines == ["refused"]:
        return None
    return [os.path.relpath(f, folder) for f in lines]


class SplitParityTest(unittest.TestCase):
    def test_layouts(self):
        for name, files in LAYOUTS.items():
            with self.subTest(layout=name), tempfile.TemporaryDirectory() as folder:
                make_folder(folder, files)
                patterns, splits = hf_splits(folder)
                unsplit = patterns == {"train": ["**"]}
                self.assertEqual(titan_files(folder, "train"), splits.get("train"))
                expected = splits["train"] if unsplit else splits.get("validation")
                self.assertEqual(titan_files(folder, "validation"), expected)

    def test_refused_split_names(self):
        for name, files in REFUSED_LAYOUTS.items():
            with self.subTest(layout=name), tempfile.TemporaryDirectory() as folder:
                make_folder(folder, files)
                with self.assertRaises((ValueError, AssertionError)):
                    hf_splits(folder)
                self.assertIsNone(titan_files(folder, "train"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--list_split_main", required=True)
    args, rest = parser.parse_known_args()
    LIST_SPLIT_MAIN = os.path.abspath(args.list_split_main)
    unittest.main(argv=[sys.argv[0]] + rest)
