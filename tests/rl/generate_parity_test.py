"""Greedy generation: titan_rl --generate against transformers' generate(do_sample=False), token
for token, 64 new tokens, random-weight Llama 3 and Qwen3 models, one batch of prompts of
different lengths (left-padded by both). Exact token equality is required; both sides compute in
fp32 and differ only by rounding (~1e-6 in the logits), so a flip would need a near tie: the
models use initializer_range 0.2 so their logits are far from uniform."""
import argparse
import os
import shutil
import sys
import unittest

import torch

import common

TITAN_RL = None
NEW_TOKENS = 64
PROMPTS = ["Sort: c e a", "What is 23 + 45?", "Once upon a time there was a small fox who",
           "a"]


class GenerateParityTest(unittest.TestCase):
    def check_family(self, family):
        tmp = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "gen_" + family)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        hf = os.path.join(tmp, "hf")
        model = common.save_random_hf(hf, family)
        prompts = os.path.join(tmp, "prompts.jsonl")
        common.write_jsonl(prompts, [{"prompt": p} for p in PROMPTS])
        out = os.path.join(tmp, "gen.jsonl")
        common.run([TITAN_RL, "--generate", f"--output={out}", "--model.name=" + family,
                    "--model.flavor=from_checkpoint", f"--model.hf_assets_path={hf}",
                    f"--model.tokenizer_path={common.TOKENIZER}", "--checkpoint.initial_load_in_hf",
                    f"--job.dump_folder={tmp}/dump", "--training.mixed_precision_param=float32",
                    "--training.seed=0", f"--rl.prompts_path={prompts}", "--rl.temperature=0",
                    f"--rl.max_new_tokens={NEW_TOKENS}", "--rl.max_seq_len=128"])
        rows = common.read_jsonl(out)
        self.assertEqual(len(rows), len(PROMPTS))
        lengths = {len(r["prompt_ids"]) for r in rows}
        self.assertGreater(len(lengths), 2, "prompts of different lengths")
        width = max(lengths)
        ids = torch.full((len(rows), width), common.EOS, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            n = len(r["prompt_ids"])
            ids[i, width - n:] = torch.tensor(r["prompt_ids"])
            mask[i, width - n:] = 1
        with torch.no_grad():
            hf_out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                    max_new_tokens=NEW_TOKENS, min_new_tokens=0,
                                    eos_token_id=common.EOS, pad_token_id=common.EOS)
        compared = 0
        for i, r in enumerate(rows):
            reference = hf_out[i, width:].tolist()
            titan = r["response_ids"]
            if r["stopped"]:
                self.assertEqual(titan, reference[:len(titan)], f"{family} row {i}")
            else:
                self.assertEqual(len(titan), NEW_TOKENS)
                self.assertEqual(titan, reference, f"{family} row {i}")
            compared += len(titan)
        print(f"{family}: {compared} greedy tokens over {len(rows)} prompts equal transformers'")

    def test_llama3(self):
        self.check_family("llama3")

    def test_qwen3(self):
        self.check_family("qwen3")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--titan_rl", required=True)
    args, rest = parser.parse_known_args()
    TITAN_RL = os.path.abspath(args.titan_rl)
    unittest.main(argv=[sys.argv[0]] + rest)
