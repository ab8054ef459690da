"""titan_train with tensor, sequence and context parallelism, alone and composed with FSDP/HSDP and
pipelines, on local ranks (CPU, Gloo on loopback) against one process.

Parity: every layout trains the debug model (fp32, 10 steps) on the same global batch of 8
sequences of 64 tokens from the same initial weights; tensor- and context-parallel ranks read the
same sequences and split the work on them, so each step's loss must match one process's within
train_runs.RTOL (1e-5 relative; why: there). Checkpoints of these layouts hold per-rank pieces
with global offsets and load into another layout.

ModelParallelTest is the default suite (2 and 4 ranks); ModelParallelLongTest (4 and 8 ranks,
Qwen3, memory) is tagged manual: bazel test //tests/distributed_train:model_parallel_long_test.

Run from the Bazel runfiles root, where configs/ and assets/ resolve as in a checkout.
"""
import json
import os
import re
import sys

import train_runs
from train_runs import GLOBAL_BATCH, STEPS, losses, state_bytes, train

TP2 = ["--parallelism.tensor_parallel_degree=2", "--parallelism.data_parallel_shard_degree=1"]
CP2 = ["--parallelism.context_parallel_degree=2", "--parallelism.data_parallel_shard_degree=1"]
PP2 = ["--parallelism.pipeline_parallel_degree=2", "--parallelism.data_parallel_shard_degree=1"]
QWEN3 = ["--model.name=qwen3", "--model.flavor=debugmodel"]


class ModelParallelTest(train_runs.ParityTest):

    def test_tp2_without_sequence_parallel(self):
        self.check_parity("tp2", 2, *TP2, "--parallelism.enable_sequence_parallel=false")

    def test_tp2_with_sequence_parallel_and_gathered_logits(self):
        # Sequence parallelism is the default; the loss on gathered logits is the other loss path.
        self.check_parity("tp2_sp", 2, *TP2, "--parallelism.disable_loss_parallel=true")

    def test_tp2_fused_loss_on_vocabulary_shards(self):
        # The head fused with the loss on each rank's vocabulary rows, sequence parallel.
        self.check_parity("tp2_fused_loss", 2, *TP2, "--training.loss_chunk_size=48")

    def test_cp2_ring(self):
        self.check_parity("cp2", 2, *CP2, "--parallelism.context_parallel_rotate_method=alltoall")

    def test_fsdp2_tp2_checkpoint_pieces_and_resume_in_one_process(self):
        # Saved at step 5 (every STEPS // 2) and resumed by one process to step 10.
        dump, proc = self.check_parity("fsdp2_tp2", 4, "--parallelism.tensor_parallel_degree=2",
                                       "--parallelism.data_parallel_shard_degree=2",
                                       checkpoint=True)
        step_dir = os.path.join(dump, "checkpoint", "step-5")
        with open(os.path.join(step_dir, "manifest.json")) as f:
            manifest = json.load(f)
        pieces = {}
        for entry in manifest["tensors"]:
            pieces.setdefault(entry["name"], []).append(entry)
        # Column-parallel wq: 2 tensor-parallel slices of rows, each in 2 FSDP row shards; the
        # four pieces tile the whole [256, 256] tensor.
        wq = pieces["layers.0.attention.wq.weight"]
        self.assertEqual(sorted(p["offsets"][0] for p in wq), [0, 64, 128, 192])
        self.assertEqual({p["offsets"][1] for p in wq}, {0})
        # Row-parallel wo: tensor-parallel slices of columns, FSDP shards of rows.
        wo = pieces["layers.0.attention.wo.weight"]
        self.assertEqual(sorted((p["offsets"][0], p["offsets"][1]) for p in wo),
                         [(0, 0), (0, 128), (128, 0), (128, 128)])
        # Replicated over tensor-parallel ranks: each FSDP shard saved once.
        self.assertEqual(sorted(p["offsets"][0] for p in pieces["layers.0.ffn_norm.weight"]),
                         [0, 128])
        self.check_resumes(step_dir, [("fsdp2_tp2_resumed_by_one", 1),
                                      ("fsdp2_tp2_resumed_by_pp2", 2, *PP2)], steps=STEPS)

    def test_initial_load_fills_each_ranks_pieces(self):
        # Each rank reads the initial checkpoint one whole tensor at a time into the pieces it
        # holds (FSDP rows within tensor-parallel slices, of its pipeline stages): one process's
        # model, loaded whole.
        base = self.fresh("initial_base")
        train(base, 1, GLOBAL_BATCH, "--checkpoint.enable=true", steps=2)
        load = [f"--checkpoint.initial_load_path={base}/checkpoint"]
        one = self.fresh("initial_one")
        train(one, 1, GLOBAL_BATCH, "--checkpoint.enable=false", *load, steps=3)
        self.assertNotEqual(losses(one)[1], self.reference[1])
        for name, degrees in (("tp2", "--parallelism.tensor_parallel_degree=2"),
                              ("pp2", "--parallelism.pipeline_parallel_degree=2")):
            _, proc = self.check_parity(f"initial_fsdp2_{name}", 4, degrees,
                                        "--parallelism.data_parallel_shard_degree=2", *load,
                                        steps=3, reference=losses(one))
            self.assertIn("initial weights from", proc.stderr)

    def test_tp2_pp2(self):
        # Stages exchange sequence-parallel slices; the last stage's loss is vocab-parallel.
        self.check_parity("tp2_pp2", 4, *TP2, *PP2)


    def test_tp2_cp2_validation_matches_one_process(self):
        # Validation runs the loss (vocab-parallel) on context-parallel shares of each sequence.
        validate = ["--validation.enable=true", "--validation.freq=5", "--validation.steps=2",
                    "--validation.seq_len=64", "--validation.local_batch_size=4"]
        one = self.fresh("validated_one")
        train(one, 1, GLOBAL_BATCH, *validate, "--checkpoint.enable=false")
        dump, _ = self.check_parity("tp2_cp2_validated", 4, *validate,
                                    "--parallelism.tensor_parallel_degree=2",
                                    "--parallelism.context_parallel_degree=2",
                                    reference=losses(one))
        want, got = losses(one, "validation_loss"), losses(dump, "validation_loss")
        self.assertEqual(sorted(got), [1, 5, 10])
        diff = train_runs.max_rel_diff(want, got)
        print(f"\ntp2_cp2 validation loss: max relative difference vs 1 process {diff:.3e}",
              file=sys.stderr)
        self.assertLessEqual(diff, train_runs.RTOL)

    def test_degrees_that_do_not_divide_the_model_fail_with_one_line(self):
        proc = train(self.fresh("tp3"), 3, GLOBAL_BATCH, "--parallelism.tensor_parallel_degree=3",
                     "--parallelism.enable_sequence_parallel=false", check=False)
        self.assertNotEqual(proc.returncode, 0)
        # Said once, naming the ranks that said it (under load the launcher may stop the others
        # before they reach the check), as the last line.
        error = ("titan_train: --parallelism.tensor_parallel_degree: [parallelism] "
                 "tensor_parallel_degree=3 does not divide the model's attention heads (16)\n")
        self.assertRegex(proc.stderr, r"\n\[ranks? [0-2][0-2,-]*\] " + re.escape(error) + "$")
        self.assertEqual(proc.stderr.count(error), 1, proc.stderr[-2000:])


class ModelParallelLongTest(train_runs.ParityTest):

    def test_tp2_checkpoint_resumes_under_cp2(self):
        # Tensor-parallel pieces (and whole norms from rank 0) load into FSDP over cp ranks.
        dump, _ = self.check_parity("tp2_saved", 2, *TP2, checkpoint=True)
        self.check_resumes(os.path.join(dump, "checkpoint", "step-5"),
                           [("tp2_resumed_by_cp2", 2, *CP2)], steps=STEPS)

    def test_tp4_holds_a_quarter_of_the_state(self):
        _, proc = self.check_parity("tp4", 4, "--parallelism.tensor_parallel_degree=4",
                                    "--parallelism.data_parallel_shard_degree=1")
        per_rank = state_bytes(proc.stderr)
        print(f"\nparameters + optimizer state per rank: 1 process {self.reference_bytes} B, "
              f"TP 4 {per_rank} B", file=sys.stderr)
        self.assertEqual(sorted(per_rank), [0, 1, 2, 3])
        for total in per_rank.values():
            # Norms stay whole on every rank; the issue asks for at most 0.3x.
            self.assertLessEqual(total, 0.3 * self.reference_bytes)

    def test_cp4_allgather(self):
        self.check_parity("cp4", 4, "--parallelism.context_parallel_degree=4",
                          "--parallelism.data_parallel_shard_degree=1")

    def test_hsdp_2x2_tp2(self):
        self.check_parity("hsdp2x2_tp2", 8, "--parallelism.data_parallel_replicate_degree=2",
                          "--parallelism.data_parallel_shard_degree=2",
                          "--parallelism.tensor_parallel_degree=2")

    def test_fsdp2_tp2_pp2(self):
        self.check_parity("fsdp2_tp2_pp2", 8, "--parallelism.data_parallel_shard_degree=2",
                          "--parallelism.tensor_parallel_degree=2",
                          "--parallelism.pipeline_parallel_degree=2",
                          "--parallelism.pipeline_parallel_schedule=Interleaved1F1B")

    def test_cp2_pp2_zero_bubble(self):
        self.check_parity("cp2_pp2", 4, *CP2, *PP2,
                          "--parallelism.pipeline_parallel_schedule=ZBVZeroBubble")

    def test_fsdp2_cp2_tp2(self):
        self.check_parity("fsdp2_cp2_tp2", 8, "--parallelism.data_parallel_shard_degree=2",
                          "--parallelism.context_parallel_degree=2",
                          "--parallelism.tensor_parallel_degree=2")

    def test_qwen3_tp2_and_cp2(self):
        one = self.fresh("qwen3_one")
        train(one, 1, GLOBAL_BATCH, *QWEN3, "--checkpoint.enable=false")
        reference = losses(one)
        self.check_parity("qwen3_tp2", 2, *QWEN3, *TP2, reference=reference)
        self.check_parity("qwen3_cp2", 2, *QWEN3, *CP2, reference=reference)


if __name__ == "__main__":
    train_runs.main()
