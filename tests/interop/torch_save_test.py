"""torch.save files as PyTorch writes them read by titan as torch.load reads them: above all what
torch.save(model.state_dict()) writes, a collections.OrderedDict with its _metadata."""
import argparse
import collections
import os
import shutil
import subprocess
import sys
import unittest

import torch
from safetensors.torch import load_file

PROBE = None


def layer_norms(count):
    return torch.nn.Sequential(*[torch.nn.LayerNorm(1) for _ in range(count)])


class TorchSaveTest(unittest.TestCase):
    def setUp(self):
        self.tmp = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), self._testMethodName)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)
        torch.manual_seed(0)

    def probe(self, obj):
        """Saves `obj` with torch.save; titan's reading of it (the probe's process)."""
        path = os.path.join(self.tmp, "weights.pt")
        torch.save(obj, path)
        return path, subprocess.run([PROBE, path, os.path.join(self.tmp, "out.safetensors")],
                                    capture_output=True, text=True)

    def test_state_dicts_read_as_torch_load_reads_them(self):
        base = torch.randn(4, 6)
        views = collections.OrderedDict(
            [("base", base), ("rows", base[1:3]), ("transposed", base.t()), ("again", base),
             ("flat_slice", base.view(-1)[5:9]), ("other", torch.arange(5, dtype=torch.int64))])
        cases = {
            "linear_layernorm": torch.nn.Sequential(torch.nn.Linear(2, 2),
                                                    torch.nn.LayerNorm(2)).state_dict(),
            # More than 1000 items: pickle writes them (and _metadata's) as several SETITEMS.
            "many_keys": layer_norms(1001).state_dict(),
            "one_key": torch.nn.Linear(3, 2, bias=False).state_dict(),  # One item: SETITEM.
            "one_key_no_metadata": collections.OrderedDict(w=torch.randn(3)),
            "empty": collections.OrderedDict(),
            "empty_module": torch.nn.ReLU().state_dict(),
            "bf16_fp16": collections.OrderedDict(
                [*torch.nn.Linear(4, 3).to(torch.bfloat16).state_dict().items(),
                 ("half", torch.randn(2, 2).half())]),
            "shared_storages_and_views": views,
            "plain_dict": dict(views),
        }
        for name, state_dict in cases.items():
            with self.subTest(name):
                path, proc = self.probe(state_dict)
                self.assertEqual(proc.returncode, 0, proc.stderr)
                loaded = torch.load(path, weights_only=True)
                self.assertEqual(proc.stdout.splitlines(), list(loaded))
                self.assertEqual(len(loaded), len(state_dict))
                read = load_file(os.path.join(self.tmp, "out.safetensors")) if loaded else {}
                self.assertEqual(sorted(read), sorted(loaded))
                for key, tensor in loaded.items():
                    self.assertEqual(read[key].dtype, tensor.dtype, key)
                    self.assertEqual(read[key].shape, tensor.shape, key)
                    self.assertTrue(torch.equal(read[key].view(torch.uint8),
                                                tensor.contiguous().view(torch.uint8)), key)

    def test_an_ordered_dict_inside_the_dict_is_refused_saying_so(self):
        # LibTorch's unpickler builds an OrderedDict below the top as None: refused, naming it.
        state_dict = torch.nn.Linear(2, 2).state_dict()
        for name, saved in [("in_a_dict", {"model": state_dict}),
                            ("in_an_ordered_dict", collections.OrderedDict(model=state_dict))]:
            with self.subTest(name):
                path, proc = self.probe(saved)
                self.assertEqual(proc.returncode, 1, proc.stdout)
                self.assertIn(f"{path}: not a torch.save state dict of tensors: data.pkl: byte ",
                              proc.stderr)
                self.assertIn(
                    ": fills a collections.OrderedDict other than the top-level one (a state dict "
                    "nested in the dict, as torch.save({\"model\": model.state_dict()}) writes "
                    "it), which titan does not read: torch.save the state dict itself",
                    proc.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--torch_save_probe", required=True)
    args, rest = parser.parse_known_args()
    PROBE = os.path.abspath(args.torch_save_probe)
    unittest.main(argv=[sys.argv[0], *rest])
