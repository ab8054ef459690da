"""Model families through the registry against PyPI transformers: Qwen3 HF -> titan -> HF round
trips (tensors bitwise, config equivalent, loadable), yarn RoPE, refused configs, and titan's
forward (loaded as the trainer loads, tests/interop/titan_forward.cc) against transformers' logits
for Qwen3 and for a Llama shape that is no titan flavor (SmolLM-135M's)."""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import unittest

import torch
import transformers
from interop_util import config_dict, convert, hf_tensors, run
from safetensors.torch import load_file, save_file

CONVERT = None
FORWARD = None
INSPECT = None

# fp32 on both sides; attention, RoPE and norms sum in different orders (SDPA kernels, interleaved
# vs rotate-half pairs), so agreement is to rounding, not bitwise.
LOGIT_TOLERANCE = 1e-4


def qwen3_config(**overrides):
    # head_dim 128 while hidden / heads is 16: the decoder must not derive it.
    kwargs = dict(vocab_size=2048, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                  max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1e6, bos_token_id=1,
                  eos_token_id=2)
    kwargs.update(overrides)
    return transformers.Qwen3Config(**kwargs)


def smollm_shaped_llama_config():
    return transformers.LlamaConfig(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, head_dim=64, tie_word_embeddings=True,
        rope_theta=1e5, max_position_embeddings=2048, rms_norm_eps=1e-5, bos_token_id=1,
        eos_token_id=2)


class FamilyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), self._testMethodName)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def save_hf(self, model_class, config, dtype, **save_kwargs):
        torch.manual_seed(0)
        model = model_class(config).to(dtype)
        with torch.no_grad():  # Norms off 1 so a swapped norm mapping is visible.
            for name, param in model.named_parameters():
                if param.dim() == 1:
                    param.add_(torch.randn_like(param) * 0.2)
        model.save_pretrained(self.path("hf"), **save_kwargs)
        return model.eval()

    def round_trip(self, *flags_back):
        titan = convert(CONVERT, self.path("hf"), self.path("titan"), "--to=titan")
        self.assertEqual(titan["model"], "qwen3")
        back = convert(CONVERT, self.path("titan"), self.path("back"), "--to=hf", *flags_back)
        original, converted = hf_tensors(self.path("hf")), hf_tensors(self.path("back"))
        self.assertEqual(sorted(original), sorted(converted))
        for name, tensor in original.items():
            self.assertEqual(tensor.dtype, converted[name].dtype, name)
            self.assertTrue(torch.equal(tensor.view(torch.uint8), converted[name].view(torch.uint8)),
                            name)
        self.assertEqual(config_dict(self.path("hf")), config_dict(self.path("back")))
        loaded = transformers.AutoModelForCausalLM.from_pretrained(self.path("back"))
        self.assertIsInstance(loaded, transformers.Qwen3ForCausalLM)
        for name, tensor in loaded.state_dict().items():
            reference = original.get(name, original["model.embed_tokens.weight"])  # tied head
            self.assertTrue(torch.equal(tensor, reference), name)
        return titan, back

    def test_qwen3_untied_fp32_sharded_round_trip_is_bitwise_identical(self):
        self.save_hf(transformers.Qwen3ForCausalLM, qwen3_config(), torch.float32,
                     max_shard_size="4MB")
        self.assertGreater(len(glob.glob(self.path("hf/model-*-of-*.safetensors"))), 2)
        titan, back = self.round_trip("--max_shard_size=4MB")
        self.assertEqual(titan["tensors"], 4 * 11 + 3)
        self.assertEqual(titan["flavor"], "custom")
        with open(os.path.join(titan["output"], "manifest.json")) as f:
            model = json.load(f)["state"]["model"]
        self.assertEqual((model["name"], model["args"]["head_dim"], model["args"]["qk_norm"]),
                         ("qwen3", 128, True))
        self.assertEqual(model["args"]["rope"]["layout"], "rotate_half")
        report = json.loads(run([INSPECT, "--json", "--verify", self.path("titan")]).stdout)
        self.assertEqual((report["model"], report["flavor"]), ("qwen3", "custom"))
        self.assertEqual(report["architecture"], "dim 256, 4 layers, 16/8 heads of 128, ffn 512, "
                                                 "vocab 2048, qk-norm")
        self.assertTrue(report["verify"]["ok"])
        proc = subprocess.run([INSPECT, "--json", f"--diff={self.path('titan')}", self.path("hf")],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(json.loads(proc.stdout)["diff"]["identical"])
        proc = subprocess.run([CONVERT, "--to=meta", self.path("titan"), self.path("meta")],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--to=meta: qwen3 has no Meta format", proc.stderr)

    def test_qwen3_tied_bf16_round_trip_is_bitwise_identical(self):
        self.save_hf(transformers.Qwen3ForCausalLM, qwen3_config(tie_word_embeddings=True),
                     torch.bfloat16)
        titan, _ = self.round_trip()
        self.assertEqual(titan["tensors"], 4 * 11 + 2)
        with open(os.path.join(titan["output"], "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual({t["dtype"] for t in manifest["tensors"]}, {"BF16"})
        self.assertIn("layers.3.attention.k_norm.weight", [t["name"] for t in manifest["tensors"]])

    def test_qwen3_yarn_round_trips(self):
        rope = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
        self.save_hf(transformers.Qwen3ForCausalLM, qwen3_config(rope_scaling=rope),
                     torch.float32)
        self.round_trip()
        back = config_dict(self.path("back"))
        self.assertEqual(back["rope_parameters"], {**rope, "rope_theta": 1e6})
        with open(os.path.join(self.path("titan/step-0/manifest.json"))) as f:
            titan_rope = json.load(f)["state"]["model"]["args"]["rope"]
        self.assertEqual((titan_rope["scaling"], titan_rope["factor"],
                          titan_rope["original_max_position_embeddings"]), ("yarn", 4.0, 128))

    def test_unrepresentable_config_is_refused_in_one_line(self):
        self.save_hf(transformers.Qwen3ForCausalLM, qwen3_config(attention_bias=True),
                     torch.float32)
        proc = subprocess.run([CONVERT, "--to=titan", self.path("hf"), self.path("titan")],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(proc.stderr.splitlines(), [
            f"convert_checkpoint: {self.path('hf')}/config.json: attention_bias true: titan's "
            "decoder has no biases"])
        self.assertFalse(os.path.exists(self.path("titan")))

    def titan_logits(self, checkpoint, tokens, *flags):
        tokens_path, logits_path = self.path("tokens.safetensors"), self.path("logits.safetensors")
        save_file({"tokens": tokens}, tokens_path)
        proc = run([FORWARD, f"--checkpoint={checkpoint}", f"--tokens={tokens_path}",
                    f"--logits={logits_path}", *flags])
        return load_file(logits_path)["logits"], proc.stdout

    def assert_logits_match(self, model, checkpoint, tokens, label, *flags):
        with torch.no_grad():
            reference = model(tokens).logits
        logits, log = self.titan_logits(checkpoint, tokens, *flags)
        diff = (logits - reference).abs().max().item()
        print(f"{label}: max |logit difference| titan vs transformers: {diff:.3g} "
              f"(max |logit| {reference.abs().max().item():.3g})", file=sys.stderr)
        self.assertLess(diff, LOGIT_TOLERANCE)
        self.assertGreater(reference.abs().max().item(), 0.1)
        return logits, log

    def test_qwen3_logits_match_transformers(self):
        for name, rope in (("qwen3", None),
                           ("qwen3 yarn", {"rope_type": "yarn", "factor": 4.0,
                                           "original_max_position_embeddings": 128})):
            shutil.rmtree(self.path("hf"), ignore_errors=True)
            shutil.rmtree(self.path("titan"), ignore_errors=True)
            model = self.save_hf(transformers.Qwen3ForCausalLM, qwen3_config(rope_scaling=rope),
                                 torch.float32)
            tokens = torch.randint(2048, (2, 40), generator=torch.Generator().manual_seed(1))
            from_hf, log = self.assert_logits_match(model, self.path("hf"), tokens,
                                                    f"{name} (HF folder)", "--in_hf",
                                                    "--model=qwen3")
            self.assertIn("holds qwen3 custom (dim 256, 4 layers, 16/8 heads of 128", log)
            # The titan copy holds the same numbers: its forward is the very same.
            convert(CONVERT, self.path("hf"), self.path("titan"), "--to=titan")
            from_titan, _ = self.titan_logits(self.path("titan"), tokens)
            self.assertTrue(torch.equal(from_hf, from_titan), name)

    def test_tied_config_with_a_head_of_its_own_is_untied_as_in_transformers(self):
        # transformers keeps such a head ("both are present in the checkpoints with different
        # values, so we will NOT tie them"); dropping it would be another model.
        self.save_hf(transformers.Qwen3ForCausalLM, qwen3_config(), torch.float32)
        with open(self.path("hf/config.json")) as f:
            config = json.load(f)
        config["tie_word_embeddings"] = True
        with open(self.path("hf/config.json"), "w") as f:
            json.dump(config, f)
        model = transformers.AutoModelForCausalLM.from_pretrained(self.path("hf")).eval()
        self.assertFalse(torch.equal(model.lm_head.weight, model.model.embed_tokens.weight))
        tokens = torch.randint(2048, (1, 24), generator=torch.Generator().manual_seed(3))
        self.assert_logits_match(model, self.path("hf"), tokens, "qwen3 tied config, own head",
                                 "--in_hf", "--model=qwen3")
        proc = run([CONVERT, "--json", "--to=titan", self.path("hf"), self.path("titan")])
        self.assertEqual(json.loads(proc.stdout)["tensors"], 4 * 11 + 3)
        warning = (f"{self.path('hf')}/model.safetensors: lm_head.weight differs from "
                   "model.embed_tokens.weight though config.json says tie_word_embeddings true")
        self.assertIn(warning, proc.stderr)
        # Inspected, then diffed: one folder read three times, warned of once.
        inspect = subprocess.run([INSPECT, f"--diff={self.path('titan')}", self.path("hf")],
                                 capture_output=True, text=True)
        self.assertEqual(inspect.stderr.count(warning), 1, inspect.stderr)

    def test_custom_llama_shape_logits_match_transformers(self):
        model = self.save_hf(transformers.LlamaForCausalLM, smollm_shaped_llama_config(),
                             torch.float32)
        tokens = torch.randint(49152, (1, 32), generator=torch.Generator().manual_seed(2))
        _, log = self.assert_logits_match(model, self.path("hf"), tokens,
                                          "llama3 SmolLM-135M shape (HF folder)", "--in_hf")
        self.assertIn("holds llama3 custom (dim 576, 30 layers, 9/3 heads of 64, ffn 1536, vocab "
                      "49152, tied)", log)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--convert_checkpoint", required=True)
    parser.add_argument("--titan_forward", required=True)
    parser.add_argument("--checkpoint_inspect", required=True)
    args, rest = parser.parse_known_args()
    CONVERT = os.path.abspath(args.convert_checkpoint)
    FORWARD = os.path.abspath(args.titan_forward)
    INSPECT = os.path.abspath(args.checkpoint_inspect)
    unittest.main(argv=[sys.argv[0], *rest])
