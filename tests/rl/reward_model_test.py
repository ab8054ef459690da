"""titan_rl with a reward model: transformers' LlamaForSequenceClassification and
Qwen3ForSequenceClassification (random weights, one label) score GRPO's rollouts, once in one
process and once FSDP-sharded over 2 ranks; every reward in rollouts.jsonl must equal transformers'
score of the same ids (its rightmost-non-pad-token convention, computed by transformers on a
right-padded batch). Folders that are not sequence classifiers are refused."""
import argparse
import os
import shutil
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


def save_reward_model(folder, family, seed):
    config, _ = common.tiny_config(family)
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
    batch = torch.full((len(ids), width), common.EOS, dtype=torch.long)
    mask = torch.zeros_like(batch)
    for i, x in enumerate(ids):
        batch[i, :len(x)] = torch.tensor(x)
        mask[i, :len(x)] = 1
    with torch.no_grad():
        return model(input_ids=batch, attention_mask=mask).logits[:, 0].double()


class RewardModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "reward_model_test")
        shutil.rmtree(cls.root, ignore_errors=True)
        os.makedirs(cls.root)
        cls.policy = os.path.join(cls.root, "policy")
        common.save_random_hf(cls.policy, "llama3")

    def job(self, name, *overrides):
        dump = os.path.join(self.root, name)
        return dump, [TITAN_RL, f"--job.config_file={CONFIG}", f"--job.dump_folder={dump}",
                      "--model.flavor=from_checkpoint", f"--model.hf_assets_path={self.policy}",
                      f"--model.tokenizer_path={common.TOKENIZER}",
                      f"--checkpoint.initial_load_path={self.policy}",
                      "--checkpoint.initial_load_in_hf", "--checkpoint.enable=false",
                      "--metrics.log_freq=1", "--rl.eval_size=8", "--rl.eval_freq=100",
                      "--rl.prompts_per_step=4", "--rl.group_size=4", "--training.steps=2",
                      *overrides]

    def check_run(self, family, seed, *parallel):
        folder = os.path.join(self.root, f"rm_{family}")
        model = save_reward_model(folder, family, seed)
        dump, cmd = self.job(f"run_{family}", "--rl.reward=reward_model",
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
        print(f"{family} reward model{' FSDP 2' if parallel else ''}: {len(rows)} rollouts, "
              f"scores {reference.min().item():.3f}..{reference.max().item():.3f}, "
              f"max |titan - transformers| {diff:.2e}")
        self.assertLess(diff, TOLERANCE)
        self.assertGreater(reference.std().item(), 1e-3)  # the rollouts' scores differ
        steps = [m for m in common.metrics(dump) if m["step"] > 0]
        self.assertEqual(len(steps), 2)

    def test_llama_reward_model_scores_as_transformers(self):
        self.check_run("llama3", 1)

    def test_qwen3_reward_model_sharded_scores_as_transformers(self):
        self.check_run("qwen3", 2, "--nproc_per_node=2",
                       "--parallelism.data_parallel_shard_degree=2")

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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--titan_rl", required=True)
    args, rest = parser.parse_known_args()
    TITAN_RL = os.path.abspath(args.titan_rl)
    unittest.main(argv=[sys.argv[0]] + rest)
