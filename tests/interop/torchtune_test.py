"""A titan checkpoint exported by convert_checkpoint to Hugging Face and to Meta's format loads in
PyPI torchtune's Llama 3 checkpointers with the tensors titan saved."""
import argparse
import json
import os
import subprocess
import sys
import unittest

import torch
from safetensors.torch import load_file
from torchtune.models import convert_weights
from torchtune.training import FullModelHFCheckpointer, FullModelMetaCheckpointer

CONVERT = None
MAKE_TITAN = None


def run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


class TorchtuneTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "torchtune_test")
        os.makedirs(cls.tmp, exist_ok=True)
        titan = os.path.join(cls.tmp, "titan")
        # Llama 3.1's original context, the one Meta's params.json (use_scaled_rope) can say.
        run([MAKE_TITAN, f"--checkpoint_dir={titan}", "--original_max_position_embeddings=8192",
             f"--logits={os.path.join(cls.tmp, 'logits.safetensors')}"])
        for to in ("hf", "meta"):
            run([CONVERT, "--from=titan", f"--to={to}", titan, os.path.join(cls.tmp, to)])
        # titan's names are Meta's; torchtune's own mapping gives the names its checkpointers use.
        titan_tensors = load_file(os.path.join(titan, "step-3", "model.safetensors"))
        cls.expected = convert_weights.meta_to_tune(titan_tensors)

    def assert_state_dict_matches(self, state):
        self.assertEqual(sorted(state), sorted(self.expected))
        for name, tensor in self.expected.items():
            self.assertEqual(state[name].dtype, tensor.dtype, name)
            self.assertTrue(torch.equal(state[name], tensor), name)

    def test_hf_checkpointer_loads_hf_export(self):
        checkpointer = FullModelHFCheckpointer(
            checkpoint_dir=os.path.join(self.tmp, "hf"), checkpoint_files=["model.safetensors"],
            model_type="LLAMA3", output_dir=os.path.join(self.tmp, "hf_out"))
        self.assert_state_dict_matches(checkpointer.load_checkpoint()["model"])

    def test_meta_checkpointer_loads_meta_export(self):
        checkpointer = FullModelMetaCheckpointer(
            checkpoint_dir=os.path.join(self.tmp, "meta"),
            checkpoint_files=["consolidated.00.pth"], model_type="LLAMA3",
            output_dir=os.path.join(self.tmp, "meta_out"))
        self.assert_state_dict_matches(checkpointer.load_checkpoint()["model"])
        with open(os.path.join(self.tmp, "meta", "params.json")) as f:
            params = json.load(f)
        self.assertEqual((params["dim"], params["n_layers"], params["n_kv_heads"]), (64, 2, 2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--convert_checkpoint", required=True)
    parser.add_argument("--make_titan_checkpoint", required=True)
    args, rest = parser.parse_known_args()
    CONVERT = os.path.abspath(args.convert_checkpoint)
    MAKE_TITAN = os.path.abspath(args.make_titan_checkpoint)
    unittest.main(argv=[sys.argv[0], *rest])
