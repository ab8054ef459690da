"""config.json as titan reads it (tests/interop/hf_config_probe.cc) against PyPI transformers:
missing keys take the family's transformers defaults, an explicit null in any key titan reads is
read as transformers reads it or refused where transformers cannot build and run the model,
folders transformers refuses are refused,
the RoPE dict and a top-level original_max_position_embeddings taken as transformers takes them,
and RoPE inverse frequencies and attention factors (YaRN and Llama 3, factors below, at and above
1, explicit attention factors) equal transformers' ROPE_INIT_FUNCTIONS."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import unittest

import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

PROBE = None

# transformers computes inverse frequencies in fp32, titan in fp64: equal to fp32 rounding.
INV_FREQ_RTOL = 1e-6

# Small shapes in which every single missing key still gives a consistent model.
FULL_CONFIGS = {
    "llama": dict(model_type="llama", hidden_size=256, num_hidden_layers=2, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=16, vocab_size=512, intermediate_size=384,
                  max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=5e5,
                  tie_word_embeddings=True, bos_token_id=5, eos_token_id=6),
    "qwen3": dict(model_type="qwen3", hidden_size=256, num_hidden_layers=2, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=64, vocab_size=512, intermediate_size=384,
                  max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=5e5,
                  tie_word_embeddings=True, bos_token_id=5, eos_token_id=6),
}

# Every config.json key titan reads, and the RoPE parameters it reads per RoPE type.
TOP_LEVEL_KEYS = (
    "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
    "head_dim", "vocab_size", "intermediate_size", "max_position_embeddings", "rms_norm_eps",
    "rope_theta", "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id",
    "hidden_act", "attention_bias", "mlp_bias", "attention_dropout", "partial_rotary_factor",
    "layer_types", "use_sliding_window", "max_window_layers", "sliding_window", "rope_scaling",
    "rope_parameters")
ROPES = (
    ("qwen3", {"rope_type": "default", "rope_theta": 2e5, "partial_rotary_factor": 1.0}),
    ("qwen3", {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 256,
               "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.5, "mscale_all_dim": 1.0,
               "attention_factor": 0.7, "truncate": False, "rope_theta": 2e5,
               "partial_rotary_factor": 1.0}),
    ("llama", {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 256,
               "rope_theta": 2e5, "partial_rotary_factor": 1.0}),
)


def titan_fields(args):
    return {"hidden_size": args["dim"], "num_hidden_layers": args["n_layers"],
            "num_attention_heads": args["n_heads"], "num_key_value_heads": args["n_kv_heads"],
            "head_dim": args["head_dim"], "vocab_size": args["vocab_size"],
            "intermediate_size": args["ffn_hidden_dim"], "rms_norm_eps": args["norm_eps"],
            "max_position_embeddings": args["max_seq_len"],
            "tie_word_embeddings": args["tie_word_embeddings"], "rope_theta": args["rope"]["theta"]}


def transformers_fields(config):
    fields = {key: getattr(config, key) for key in (
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "vocab_size", "intermediate_size", "rms_norm_eps", "max_position_embeddings",
        "tie_word_embeddings")}
    fields["rope_theta"] = config.rope_parameters["rope_theta"]
    return fields


class HfConfigReferenceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), self._testMethodName)
        shutil.rmtree(self.tmp, ignore_errors=True)
        os.makedirs(self.tmp)

    def write(self, config):
        with open(os.path.join(self.tmp, "config.json"), "w") as f:
            json.dump(config, f)

    def titan(self, config):
        """titan's reading of `config`: (probe JSON, None) or (None, its one-line refusal)."""
        self.write(config)
        proc = subprocess.run([PROBE, os.path.join(self.tmp, "config.json")],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            return None, proc.stderr.strip()
        return json.loads(proc.stdout), None

    def reference(self, config):
        """transformers' config for `config`, or the exception it refuses it with."""
        self.write(config)
        try:
            return transformers.AutoConfig.from_pretrained(self.tmp), None
        except Exception as e:  # transformers' refusals have many types
            return None, e

    def reference_model(self, config):
        """transformers' model for `config` once it has built and run it, or the exception that
        stopped it."""
        reference, error = self.reference(config)
        if error is not None:
            return None, error
        try:
            model = transformers.AutoModelForCausalLM.from_config(reference)
            with torch.no_grad():
                model(torch.tensor([[1, 2, 3, 4]]))
        except Exception as e:  # the model code's failures have many types
            return None, e
        return model, None

    def assert_read_as_transformers(self, config, label):
        probe, refusal = self.titan(config)
        reference, error = self.reference(config)
        self.assertIsNone(error, label)
        self.assertIsNone(refusal, label)
        self.assertEqual(titan_fields(probe["args"]), transformers_fields(reference), label)
        self.assertEqual((probe["bos_token_id"], probe["eos_token_id"]),
                         (reference.bos_token_id, reference.eos_token_id), label)

    def test_missing_keys_take_the_familys_transformers_defaults(self):
        for family, full in FULL_CONFIGS.items():
            self.assert_read_as_transformers(full, family)
            for key in full:
                if key != "model_type":
                    config = {k: v for k, v in full.items() if k != key}
                    self.assert_read_as_transformers(config, f"{family} without {key}")
            self.assert_read_as_transformers({"model_type": family}, f"{family}: no keys")

    def assert_null_read_as_transformers(self, config, key, label):
        """titan refuses `config` naming the null `key` where transformers cannot build and run
        the model, else reads it as transformers does, RoPE included."""
        model, error = self.reference_model(config)
        probe, refusal = self.titan(config)
        if error is not None:
            self.assertIsNone(probe, f"{label}: transformers fails with {error!r}")
            self.assertIn(f"{key} is null; expected a", refusal, label)
            return
        self.assertIsNone(refusal, label)
        reference = model.config
        self.assertEqual(titan_fields(probe["args"]), transformers_fields(reference), label)
        self.assertEqual((probe["bos_token_id"], probe["eos_token_id"]),
                         (reference.bos_token_id, reference.eos_token_id), label)
        rotary = model.model.rotary_emb
        self.assert_rope_values(probe, rotary.inv_freq, rotary.attention_scaling, label)

    def test_null_keys_are_read_or_refused_as_transformers_does(self):
        for family, full in FULL_CONFIGS.items():
            for key in TOP_LEVEL_KEYS:
                self.assert_null_read_as_transformers({**full, key: None}, key,
                                                      f"{family} with {key} null")
        # rope_parameters' rope_theta stands in for a null top-level one.
        for where in ("rope_scaling", "rope_parameters"):
            config = {**FULL_CONFIGS["qwen3"], "rope_theta": None,
                      where: {"rope_type": "default", "rope_theta": 2e5}}
            self.assert_null_read_as_transformers(config, "rope_theta", f"{where} with theta")
        yarn = ROPES[1][1]
        config = {**FULL_CONFIGS["qwen3"], "partial_rotary_factor": None, "rope_scaling": yarn}
        self.assert_null_read_as_transformers(config, "partial_rotary_factor", "yarn, null factor")

    def test_null_rope_parameters_are_read_or_refused_as_transformers_does(self):
        for where in ("rope_scaling", "rope_parameters"):
            for family, rope in ROPES:
                for key in (*rope, "type"):
                    config = {**FULL_CONFIGS[family], where: {**rope, key: None}}
                    self.assert_null_read_as_transformers(
                        config, key, f"{family} {where} {rope['rope_type']} with {key} null")
            config = {**FULL_CONFIGS["qwen3"], where: {"type": None}}
            self.assert_null_read_as_transformers(config, "type", f"{where} type null")

    def test_rope_dict_and_original_max_positions_are_taken_as_transformers_does(self):
        yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}
        llama3 = {"rope_type": "llama3", "factor": 2.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 128}
        full = FULL_CONFIGS["llama"]
        # transformers takes `rope_scaling or rope_parameters`: an empty rope_scaling falls through.
        for rope in (yarn, llama3, {"rope_type": "default", "rope_theta": 2e5}):
            for theta in (5e5, None):
                config = {**full, "rope_theta": theta, "rope_scaling": {}, "rope_parameters": rope}
                self.assert_null_read_as_transformers(config, "rope_theta",
                                                      f"empty rope_scaling, {rope}, theta {theta}")
        # A top-level original_max_position_embeddings overrides the scaled RoPE's own.
        for rope in (yarn, llama3, {"rope_type": "default"}):
            for where in ("rope_scaling", "rope_parameters"):
                for top in (512, 64, None):
                    config = {**full, where: rope, "original_max_position_embeddings": top}
                    self.assert_null_read_as_transformers(
                        config, "original_max_position_embeddings",
                        f"{where} {rope}, top-level original_max_position_embeddings {top}")

    def test_folders_transformers_refuses_are_refused(self):
        # LlamaConfig wants hidden_size divisible by the heads, head_dim or not.
        config = {**FULL_CONFIGS["llama"], "hidden_size": 200, "num_attention_heads": 12}
        self.assertIsNotNone(self.reference(config)[1])
        _, refusal = self.titan(config)
        self.assertIn("hidden_size 200 is not a multiple of num_attention_heads 12", refusal)
        # Qwen3Config's 32 key-value heads cannot serve 4 heads: the model fails on its input.
        config = dict(model_type="qwen3", hidden_size=64, num_hidden_layers=1,
                      num_attention_heads=4, head_dim=16, vocab_size=64, intermediate_size=32)
        reference, _ = self.reference(config)
        with self.assertRaises(RuntimeError):
            transformers.Qwen3ForCausalLM(reference)(torch.tensor([[1, 2, 3]]))
        _, refusal = self.titan(config)
        self.assertIn("4/32 heads", refusal)
        self.assertIn("num_key_value_heads 32", refusal)
        # A yarn without factor.
        config = {**FULL_CONFIGS["qwen3"], "rope_scaling": {"rope_type": "yarn"}}
        self.assertIsNotNone(self.reference(config)[1])
        self.assertIn('missing key "factor"', self.titan(config)[1])

    def test_sliding_window_defaults_decide_what_slides(self):
        # Qwen3Config: sliding_window 4096 and max_window_layers 28 when missing.
        base = {**FULL_CONFIGS["qwen3"], "num_hidden_layers": 30, "use_sliding_window": True}
        for label, config in (
                ("no sliding_window", {k: v for k, v in base.items()}),
                ("no max_window_layers", {**base, "sliding_window": 512}),
                ("max_window_layers 30", {**base, "sliding_window": 512, "max_window_layers": 30}),
                ("sliding_window null", {**base, "sliding_window": None})):
            reference, error = self.reference(config)
            self.assertIsNone(error, label)
            slides = "sliding_attention" in reference.layer_types
            probe, refusal = self.titan(config)
            self.assertEqual(probe is None, slides, f"{label}: {refusal}")
            if slides:
                self.assertIn("use_sliding_window true", refusal, label)

    def test_keys_the_familys_config_lacks_are_ignored_as_transformers_does(self):
        # LlamaConfig has no sliding-window fields, Qwen3Config no mlp_bias: their models never
        # read them, whatever the value.
        for label, config in (
                ("llama sliding", {**FULL_CONFIGS["llama"], "use_sliding_window": True,
                                   "sliding_window": 4, "max_window_layers": 0,
                                   "layer_types": ["sliding_attention", "full_attention"]}),
                ("qwen3 mlp_bias", {**FULL_CONFIGS["qwen3"], "mlp_bias": True})):
            self.assert_read_as_transformers(config, label)

    def assert_rope_matches(self, config, label):
        probe, refusal = self.titan(config)
        self.assertIsNone(refusal, label)
        reference, error = self.reference(config)
        self.assertIsNone(error, label)
        rope_type = reference.rope_parameters["rope_type"]
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](reference, "cpu")
        self.assert_rope_values(probe, inv_freq, attention_factor, label)

    def assert_rope_values(self, probe, inv_freq, attention_factor, label):
        titan_inv_freq = torch.tensor(probe["inv_freq"], dtype=torch.float64)
        torch.testing.assert_close(titan_inv_freq, inv_freq.double(), rtol=INV_FREQ_RTOL, atol=0,
                                   msg=label)
        self.assertAlmostEqual(probe["attention_factor"], attention_factor, places=12, msg=label)

    def test_rope_frequencies_and_attention_factor_match_transformers(self):
        for factor in (0.5, 1.0, 2.0):
            for extra in ({}, {"attention_factor": 0.7}, {"mscale": 0.5, "mscale_all_dim": 1.0},
                          {"mscale": -1.0, "mscale_all_dim": 1.0}, {"truncate": False}):
                rope = {"rope_type": "yarn", "factor": factor,
                        "original_max_position_embeddings": 256, **extra}
                self.assert_rope_matches({**FULL_CONFIGS["qwen3"], "rope_scaling": rope},
                                         f"yarn {rope}")
            rope = {"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 256}
            self.assert_rope_matches({**FULL_CONFIGS["llama"], "rope_scaling": rope},
                                     f"llama3 {rope}")

    def test_rope_transformers_cannot_compute_is_refused_naming_the_key(self):
        for key, value in (("factor", 0.0), ("factor", -1.0), ("attention_factor", 0.0),
                           ("attention_factor", -0.5)):
            rope = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 256,
                    key: value}
            config = {**FULL_CONFIGS["qwen3"], "rope_scaling": rope}
            probe, refusal = self.titan(config)
            self.assertIsNone(probe, rope)
            self.assertIn(f"rope_scaling: {key} {value:g}, expected a positive number", refusal)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf_config_probe", required=True)
    args, rest = parser.parse_known_args()
    PROBE = os.path.abspath(args.hf_config_probe)
    unittest.main(argv=[sys.argv[0], *rest])
