"""titan_rl with a reward model: transformers' LlamaForSequenceClassification and
Qwen3ForSequenceClassification (random weights, one label) score GRPO's rollouts, once in one
process and once FSDP-sharded over 2 ranks; every reward in rollouts.jsonl must equal transformers'
score of the same ids (its rightmost-non-pad-token convention, computed by transformers on a
right-padded batch). Folders that are not sequence classifiers are refused."""
import argparse
import collections
import os
import sys
import unittest

import torch
import transformers

import common

TITAN_RL = None
CONFIG = "configs/rl_grpo_sorting.toml"
# fp32 forwards through different kernels (and FSDP's gathered weights): scores of magnitude ~1
# agree to about 1e-6; 1e-5 leaves room for the reduction order and fails on any wrong token.
TOLERANCE = 1e-5


def save_reward_model(folder, family, seed, pad):
    config, _ = common.tiny_config(family, pad_token_id=pad)
    config.num_labels = 1
    cls = (transformers.Qwen3ForSequenceClassification if family == "qwen3"
           else transformers.LlamaForSequenceClassification)
    torch.manual_seed(seed)
    model = cls(config).eval()
    model.save_pretrained(folder)
    return model


def transformers_scores(model, rows):
    ids = [r["prompt_ids"] + r["response_ids"] for r in rows]
    width = max(len(x) for x in ids)
    batch = torch.full((len(ids), width), model.config.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for i, x in enumerate(ids):
        batch[i, :len(x)] = torch.tensor(x)
        mask[i, :len(x)] = 1
    with torch.no_grad():
        return model(input_ids=batch, attention_mask=mask).logits[:, 0].double()


class RewardModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = common.fresh_dir("reward_model_test")
        cls.policy = os.path.join(cls.root, "policy")
        common.save_random_hf(cls.policy, "llama3")

    def job(self, name, *overrides):
        dump = os.path.join(self.root, name)
        return dump, common.short_run(TITAN_RL, CONFIG, dump, self.policy, *overrides)

    def check_run(self, family, seed, *parallel, pad=common.EOS):
        folder = os.path.join(self.root, f"rm_{family}_{pad}")
        model = save_reward_model(folder, family, seed, pad)
        dump, cmd = self.job(f"run_{family}_{pad}", "--rl.reward=reward_model",
                             f"--rl.reward_model_path={folder}", *parallel)
        common.run(cmd)
        rows = []
        for name in sorted(os.listdir(dump)):
            if name.startswith("rollouts"):
                rows += common.read_jsonl(os.path.join(dump, name))
        self.assertEqual(len(rows), 2 * 4 * 4)  # steps x prompts x group
        titan = torch.tensor([r["reward"] for r in rows], dtype=torch.double)
        reference = transformers_scores(model, rows)
        diff = (titan - reference).abs().max().item()
        print(f"{family} reward model{' FSDP 2' if parallel else ''}, pad {pad}: {len(rows)} "
              f"rollouts ({sum(r['response_ids'][-1] == pad for r in rows)} ending with it), "
              f"scores {reference.min().item():.3f}..{reference.max().item():.3f}, "
              f"max |titan - transformers| {diff:.2e}")
        self.assertLess(diff, TOLERANCE)
        self.assertGreater(reference.std().item(), 1e-3)  # the rollouts' scores differ
        steps = [m for m in common.metrics(dump) if m["step"] > 0]
        self.assertEqual(len(steps), 2)
        return rows

    def test_llama_reward_model_scores_as_transformers(self):
        rows = self.check_run("llama3", 1)
        # Random responses seldom end with EOS: again with the most common last token of step 1
        # (whose rollouts do not depend on the rewards) as the pad id, so that the
        # rightmost-non-pad rule skips trailing tokens.
        first = [r for r in rows if r["step"] == 1]
        last = collections.Counter(r["response_ids"][-1] for r in first).most_common(1)[0][0]
        again = self.check_run("llama3", 1, pad=last)
        self.assertEqual([r["response_ids"] for r in again if r["step"] == 1],
                         [r["response_ids"] for r in first])
        self.assertGreater(sum(r["response_ids"][-1] == last for r in again), 0)

    def test_qwen3_reward_model_sharded_scores_as_transformers(self):
        self.check_run("qwen3", 2, "--nproc_per_node=2",
                       "--parallelism.data_parallel_shard_degree=2")

    def test_non_finite_scores_are_refused(self):
        folder = os.path.join(self.root, "rm_nan")
        model = save_reward_model(folder, "llama3", 3, common.EOS)
        with torch.no_grad():
            model.score.weight.fill_(float("nan"))
        model.save_pretrained(folder)
        _, cmd = self.job("run_nan", "--rl.reward=reward_model", f"--rl.reward_model_path={folder}")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn(f"[rl] reward_model_path {folder}: reward 1 of 8 is nan, expected a finite "
                      "number", proc.stderr)

    def test_a_causal_lm_or_a_missing_path_is_refused(self):
        _, cmd = self.job("refused_lm", "--rl.reward=reward_model",
                          f"--rl.reward_model_path={self.policy}")
        proc = common.run(cmd, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("expected one *ForSequenceClassification", proc.stderr)
        _, cmd = self.job("refused_path", "--rl.reward=reward_model")
        proc = common.run(cmd, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("reward_model_path", proc.stderr)
        # A folder that is not there: the key that names it, then what is missing.
        _, cmd = self.job("missing_path", "--rl.reward=reward_model",
                          "--rl.reward_model_path=/nonexistent")
        proc = common.run(cmd, check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertIn("[rl] reward_model_path: /nonexistent/config.json: open failed",
                      proc.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--titan_rl", required=True)
    args, rest = parser.parse_known_args()
    TITAN_RL = os.path.abspath(args.titan_rl)
    unittest.main(argv=[sys.argv[0]] + rest)
