"""Pipeline schedules against PyTorch 2.11's (torch.distributed.pipelining.schedules).

For every schedule over a grid of ranks, stages per rank and microbatches, titan's per-rank
action order (pp_schedule --format=csv) must equal PyTorch's: for the multi-stage schedules the
pipeline_order its runtime executes (get_schedule_ops, padding dropped, DualPipeV's overlapped
forward+backward pairs as forward then backward), for GPipe and 1F1B the order in which their
_step_microbatches calls the stage (recorded on a mocked stage). Both must also refuse the same
combinations. Exact: these are orders, not numbers.
"""
import subprocess
import sys
import unittest
from unittest import mock

from torch.distributed.pipelining._schedule_visualizer import get_schedule_ops
from torch.distributed.pipelining.schedules import Schedule1F1B, ScheduleGPipe
from torch.distributed.pipelining.stage import PipelineStage

PP_SCHEDULE = None
MULTI = ["Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV"]
SINGLE = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}


def titan_order(schedule, pp, microbatches, per_rank):
    proc = subprocess.run([PP_SCHEDULE, f"--schedule={schedule}", f"--pp={pp}",
                           f"--microbatches={microbatches}", f"--stages_per_rank={per_rank}",
                           "--format=csv"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None, proc.stderr.strip()
    return [line.split(",") for line in proc.stdout.strip().split("\n")], ""


def multi_stage_order(schedule, pp, microbatches, per_rank):
    ranks = get_schedule_ops(schedule, pp, microbatches, per_rank)
    order = []
    for actions in ranks:
        names = []
        for action in actions:
            if action is None:
                continue
            for part in action.sub_actions or (action,):
                names.append(str(part))
        order.append(names)
    return order


def single_stage_order(cls, pp, microbatches):
    """The stage calls cls._step_microbatches makes on each rank, communication mocked out."""
    order = []
    for rank in range(pp):
        stage = mock.create_autospec(PipelineStage, instance=True)
        stage.group_rank, stage.group_size, stage.num_stages = rank, pp, pp
        stage.stage_index, stage.is_first, stage.is_last = rank, rank == 0, rank == pp - 1
        stage.submod, stage.has_backward = None, True
        log = []
        stage.forward_one_chunk.side_effect = lambda i, *a, log=log, r=rank, **k: log.append(f"{r}F{i}")
        stage.backward_one_chunk.side_effect = lambda i, *a, log=log, r=rank, **k: log.append(f"{r}B{i}")
        for name in ("get_fwd_recv_ops", "get_fwd_send_ops", "get_bwd_recv_ops", "get_bwd_send_ops"):
            getattr(stage, name).return_value = []
        schedule = cls(stage, microbatches, loss_fn=lambda output, target: output)
        schedule._maybe_compute_loss = lambda *a, **k: None
        schedule._maybe_get_loss = lambda *a, **k: None
        schedule._update_losses = lambda *a, **k: None
        schedule._step_microbatches(arg_mbs=[()] * microbatches, kwarg_mbs=[{}] * microbatches,
                                    target_mbs=[None] * microbatches, losses=None)
        order.append(log)
    return order


def pytorch_order(schedule, pp, microbatches, per_rank):
    try:
        if schedule in SINGLE:
            return single_stage_order(SINGLE[schedule], pp, microbatches), ""
        return multi_stage_order(schedule, pp, microbatches, per_rank), ""
    except (ValueError, AssertionError, RuntimeError) as e:
        return None, str(e)


class ScheduleReferenceTest(unittest.TestCase):
    def check(self, schedule, pp, microbatches, per_rank):
        want, why_not = pytorch_order(schedule, pp, microbatches, per_rank)
        got, error = titan_order(schedule, pp, microbatches, per_rank)
        label = f"{schedule} pp={pp} stages/rank={per_rank} microbatches={microbatches}"
        if want is None:
            self.assertIsNone(got, f"{label}: PyTorch refuses ({why_not}), titan runs it")
            return 0
        self.assertIsNotNone(got, f"{label}: PyTorch runs it, titan refuses: {error}")
        self.assertEqual(got, want, label)
        return 1

    def test_single_stage_schedules(self):
        compared = 0
        for schedule in SINGLE:
            for pp in (2, 3, 4):
                for microbatches in range(1, 10):
                    compared += self.check(schedule, pp, microbatches, 1)
        print(f"\nGPipe, 1F1B: {compared} combinations equal to PyTorch's", file=sys.stderr)
        self.assertGreater(compared, 40)

    def test_multi_stage_schedules(self):
        compared = 0
        for schedule in MULTI:
            v_shaped = schedule in ("ZBVZeroBubble", "DualPipeV")
            for pp in (2, 3, 4):
                for per_rank in ((2,) if v_shaped else (2, 3)):
                    for microbatches in range(1, 13):
                        compared += self.check(schedule, pp, microbatches, per_rank)
        print(f"\nmulti-stage schedules: {compared} combinations equal to PyTorch's",
              file=sys.stderr)
        self.assertGreater(compared, 200)


if __name__ == "__main__":
    PP_SCHEDULE = sys.argv.pop(1)
    unittest.main()
