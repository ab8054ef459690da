"""Pipeline parallelism in titan_train against one process (train_runs.py says how and within what):
the global batch of 8 runs as 8 pipeline microbatches of one sequence (or, with data parallelism
or gradient accumulation, fewer), every schedule must give one process's losses, checkpoints of
any layout resume on any other, and validation runs through the stages.

PipelineParallelTest runs by default; PipelineParallelLongTest (the rest of the acceptance
matrix: every schedule, 4 stages, Qwen3, FSDP × PP, DDP × PP, a CSV schedule, the final export)
is tagged manual: bazel test //tests/distributed_train:pipeline_parallel_long_test.
"""
import os
import sys

import train_runs
from train_runs import GLOBAL_BATCH, RTOL, losses, max_rel_diff, train

PP2 = ["--parallelism.pipeline_parallel_degree=2", "--parallelism.data_parallel_shard_degree=1"]
VALIDATION = ["--validation.enable=true", "--validation.freq=5", "--validation.steps=2",
              "--validation.seq_len=64", "--validation.local_batch_size=4"]


def schedule(name):
    return f"--parallelism.pipeline_parallel_schedule={name}"


class PipelineParallelTest(train_runs.ParityTest):
    reference_flags = VALIDATION

    def test_pp2_1f1b_validates_and_its_checkpoint_resumes_on_one_process_and_fsdp2(self):
        dump, proc = self.check_parity("pp2_1f1b", 2, *PP2, *VALIDATION, checkpoint=True)
        # Rank 0 logged the schedule's table.
        self.assertIn("Step 00: 0F0", proc.stderr)
        step_dir = os.path.join(dump, "checkpoint", "step-5")
        # Each stage's rank wrote its own parameters and optimizer state.
        self.assertEqual(sorted(n for n in os.listdir(step_dir) if n.endswith(".safetensors")),
                         ["model-00000-of-00002.safetensors", "model-00001-of-00002.safetensors",
                          "optimizer-00000-of-00002.safetensors",
                          "optimizer-00001-of-00002.safetensors"])
        self.check_resumes(step_dir, [("pp2_resume_one", 1), ("pp2_resume_fsdp2", 2)],
                           steps=train_runs.STEPS)

    def test_fsdp2_checkpoint_resumes_on_pp2(self):
        dump, _ = self.check_parity("fsdp2_for_pp", 2, checkpoint=True)
        self.check_resumes(os.path.join(dump, "checkpoint", "step-5"),
                           [("fsdp2_resume_pp2_1f1b", 2, *PP2),
                            ("fsdp2_resume_pp2_zbv", 2, *PP2, schedule("ZBVZeroBubble"))],
                           steps=train_runs.STEPS)

    def test_zbv_splits_backward_under_op_level_checkpointing_and_gradient_accumulation(self):
        # 2 accumulation steps of 4 sequences, each 4 microbatches through the V.
        self.check_parity("pp2_zbv_op_ac_ga", 2, *PP2, schedule("ZBVZeroBubble"),
                          "--activation_checkpoint.mode=selective",
                          "--activation_checkpoint.selective_ac_option=op", local_batch=4)

    def test_zbv_fused_loss_splits_its_backward_and_validates(self):
        # The last stage fuses head and loss: its input and weight gradients come from separate
        # passes (I and W), and validation runs the fused loss forward only.
        self.check_parity("pp2_zbv_fused_loss", 2, *PP2, *VALIDATION, schedule("ZBVZeroBubble"),
                          "--training.loss_chunk_size=48")

    def test_qwen3_initial_load_fills_each_stage_and_its_tied_head(self):
        # Each stage's rank reads its own tensors of the initial checkpoint; the last stage's
        # copy of the tied embedding takes the loaded value from the first stage.
        qwen = ["--model.name=qwen3", "--model.flavor=debugmodel"]
        base = self.fresh("qwen3_initial_base")
        train(base, 1, GLOBAL_BATCH, *qwen, "--checkpoint.enable=true", steps=2)
        load = [*qwen, f"--checkpoint.initial_load_path={base}/checkpoint"]
        one = self.fresh("qwen3_initial_one")
        train(one, 1, GLOBAL_BATCH, "--checkpoint.enable=false", *load, steps=3)
        self.check_parity("qwen3_initial_pp2", 2, *PP2, *load, steps=3, reference=losses(one))

    def test_param_groups_match_over_every_stage(self):
        # README's groups: tok_embeddings is on the first stage only, yet rank 1 takes the group
        # (its parameters are elsewhere), and both stages train as one process does.
        groups = ('--optimizer.param_groups=[{pattern = "norm|bias$", weight_decay = 0.0}, '
                  '{pattern = "tok_embeddings", lr = 1e-4}]')
        one = self.fresh("param_groups_one")
        train(one, 1, GLOBAL_BATCH, "--checkpoint.enable=false", groups, steps=3)
        _, proc = self.check_parity("param_groups_pp2", 2, *PP2, groups, steps=3,
                                    reference=losses(one))
        self.assertRegex(proc.stderr, r"\[rank 1\] .* 0 params of this rank's stages \(1 in the "
                         r'model\) matching "tok_embeddings"')
        # A pattern that matches on no stage is refused once, on both ranks; ^output, on the last
        # stage only, is not.
        proc = train(self.fresh("param_groups_typo"), 2, GLOBAL_BATCH, *PP2,
                     '--optimizer.param_groups=[{pattern = "^output", lr = 1e-4}, '
                     '{pattern = "tok_embedingz"}]', check=False)
        self.assertEqual(proc.returncode, 1, proc.stderr[-2000:])
        self.assertTrue(proc.stderr.endswith(
            '\n[ranks 0-1] titan_train: --optimizer.param_groups: [optimizer] param_groups[1]'
            '.pattern="tok_embedingz" matches no parameter that an earlier group has not '
            'claimed\n'), proc.stderr[-2000:])

    def test_impossible_schedules_stop_with_one_line(self):
        # 1F1B needs at least as many microbatches as stages: 4 stages, 2 microbatches of 1.
        proc = train(self.fresh("too_few"), 4, 2, "--parallelism.pipeline_parallel_degree=4",
                     "--parallelism.data_parallel_shard_degree=1", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("needs at least as many microbatches as stages (4); microbatches = "
                      "[training] local_batch_size / [parallelism] "
                      "pipeline_parallel_microbatch_size: raise local_batch_size or lower "
                      "pipeline_parallel_microbatch_size to make at least 4", proc.stderr)
        # A CSV schedule where rank 1 runs a backward before the forward it needs arrives.
        csv = os.path.join(self.tmp, "deadlock.csv")
        with open(csv, "w") as f:
            f.write("0F0,0B0\n1B0,1F0\n")
        proc = train(self.fresh("deadlock"), 2, 1, *PP2,
                     f"--parallelism.pipeline_parallel_schedule_csv={csv}", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("deadlocks", proc.stderr)


class PipelineParallelLongTest(train_runs.ParityTest):
    def test_pp2_every_other_schedule(self):
        for name in ("GPipe", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
                     "DualPipeV"):
            self.check_parity(f"pp2_{name}", 2, *PP2, schedule(name))

    def test_pp4_interleaved_1f1b_with_two_stages_per_rank(self):
        _, proc = self.check_parity("pp4_interleaved", 4, "--parallelism.pipeline_parallel_degree=4",
                                    "--parallelism.data_parallel_shard_degree=1",
                                    schedule("Interleaved1F1B"))
        self.assertIn("pipeline stages 0,4 of 8", proc.stderr)

    def test_fsdp2_x_pp2_zero_bubble_with_checkpointing_and_accumulation(self):
        # 4 ranks: 2 stages × 2 shards; 2 accumulation steps of 2 sequences (2 microbatches each).
        # Resharding after forward: a later microbatch's I pass gathers again before an earlier
        # one's W pass, and each must free only its own gathered weights.
        self.check_parity("fsdp2_pp2", 4, "--parallelism.pipeline_parallel_degree=2",
                          "--parallelism.data_parallel_shard_degree=2",
                          "--parallelism.fsdp_reshard_after_forward=always",
                          schedule("InterleavedZeroBubble"),
                          "--activation_checkpoint.mode=selective",
                          "--activation_checkpoint.selective_ac_option=2", local_batch=2)

    def test_ddp2_x_pp2(self):
        self.check_parity("ddp2_pp2", 4, "--parallelism.pipeline_parallel_degree=2",
                          "--parallelism.data_parallel_replicate_degree=2",
                          "--parallelism.data_parallel_shard_degree=1")

    def test_csv_schedule(self):
        # GPipe's order with every backward split into I and W, the W's at the end.
        forwards = [",".join(f"{r}F{m}" for m in range(8)) for r in range(2)]
        inputs = [",".join(f"{r}I{m}" for m in range(8)) for r in range(2)]
        weights = [",".join(f"{r}W{m}" for m in range(8)) for r in range(2)]
        csv = os.path.join(self.tmp, "custom.csv")
        with open(csv, "w") as f:
            f.write("\n".join(f"{forwards[r]},{inputs[r]},{weights[r]}" for r in range(2)) + "\n")
        self.check_parity("pp2_csv", 2, *PP2, f"--parallelism.pipeline_parallel_schedule_csv={csv}")

    def test_qwen3_pp2_with_its_tied_head(self):
        qwen = ["--model.name=qwen3", "--model.flavor=debugmodel"]
        one = self.fresh("qwen3_one")
        train(one, 1, GLOBAL_BATCH, *qwen, "--checkpoint.enable=false")
        reference = losses(one)
        # Loop placement: the tied copy is on the other rank; V placement: on the same one.
        for name in ("1F1B", "ZBVZeroBubble"):
            self.check_parity(f"qwen3_pp2_{name}", 2, *PP2, *qwen, schedule(name),
                              reference=reference)

    def test_final_export_gathers_every_stage(self):
        # The default last save is one consolidated model.safetensors; rank 0 gathers the stages.
        dump = self.fresh("pp2_export")
        train(dump, 2, GLOBAL_BATCH, *PP2, "--checkpoint.enable=true",
              "--checkpoint.interval=100", "--checkpoint.last_save_model_only=true")
        one = self.fresh("one_export")
        train(one, 1, GLOBAL_BATCH, "--checkpoint.enable=true", "--checkpoint.interval=100",
              "--checkpoint.last_save_model_only=true")
        # Both exports start a one-process run: the same first loss, within the training's drift.
        first = []
        for name, export in (("from_pp2", dump), ("from_one", one)):
            run = self.fresh(name)
            train(run, 1, GLOBAL_BATCH, "--checkpoint.enable=false",
                  f"--checkpoint.initial_load_path={export}/checkpoint/step-{train_runs.STEPS}",
                  steps=1)
            first.append(losses(run)[1])
        diff = abs(first[0] - first[1]) / first[1]
        print(f"\nfirst loss from the PP 2 export vs the one-process export: {diff:.3e}",
              file=sys.stderr)
        self.assertLessEqual(diff, RTOL)


if __name__ == "__main__":
    train_runs.main()
