"""Checks that TensorBoard's own reader accepts what TensorBoardWriter writes.

Usage: tensorboard_reader_test.py WRITE_SCALAR_EVENTS_BINARY
"""

import os
import subprocess
import sys
import tempfile
import time

import numpy as np

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    sys.exit("tensorboard is not installed in the test environment: tools/setup.sh must pin it")

# (tag, step, value): tags the trainer logs, a value float32 cannot hold exactly, a negative one,
# zeros.
SCALARS = [
    ("loss_metrics/global_avg_loss", 1, 10.8125),
    ("loss_metrics/global_avg_loss", 2, 9.123456789),
    ("lr", 1, 8e-4),
    ("lr", 2, 7.5e-4),
    ("throughput(tps)", 2, 12345.0),
    ("mfu(%)", 2, 0.05),
    ("memory/max_reserved(GiB)", 2, 0.52),
    ("validation_metrics/loss", 2, -3.5),
    ("grad_norm", 1, 0.0),  # proto3 leaves a 0 out unless the field has presence
    ("grad_norm", 2, -0.0),
]


def main():
    writer = sys.argv[1]
    log_dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    stdin = "".join(f"{tag}\t{step}\t{value!r}\n" for tag, step, value in SCALARS)
    path = subprocess.run([writer, log_dir], input=stdin, text=True, capture_output=True,
                          check=True).stdout.strip()
    assert os.path.basename(path).startswith("events.out.tfevents."), path

    accumulator = event_accumulator.EventAccumulator(log_dir)
    accumulator.Reload()
    expected_tags = sorted({tag for tag, _, _ in SCALARS})
    got_tags = sorted(accumulator.Tags()["scalars"])
    assert got_tags == expected_tags, f"tags: expected {expected_tags}, got {got_tags}"
    for tag in expected_tags:
        expected = [(step, float(np.float32(value))) for t, step, value in SCALARS if t == tag]
        got = [(event.step, event.value) for event in accumulator.Scalars(tag)]
        assert got == expected, f"{tag}: expected {expected}, got {got}"
    print(f"OK: {len(SCALARS)} scalars under {len(expected_tags)} tags read back from {path}")
    check_resumed_run_replaces_redone_steps(writer, log_dir)


def check_resumed_run_replaces_redone_steps(writer, log_dir):
    """A run resumed from step 1 logs step 2 again: TensorBoard shows its points, not the first
    run's (every tag's points from step 2 on are hidden, as with PyTorch's purge_step)."""
    time.sleep(1.1)  # a new file: names carry the second
    subprocess.run([writer, log_dir, "2"], input="lr\t2\t0.5\nlr\t3\t0.25\n", text=True,
                   capture_output=True, check=True)
    accumulator = event_accumulator.EventAccumulator(log_dir)
    accumulator.Reload()
    got = {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
           for tag in ("lr", "loss_metrics/global_avg_loss", "throughput(tps)")}
    expected = {"lr": [(1, float(np.float32(8e-4))), (2, 0.5), (3, 0.25)],
                "loss_metrics/global_avg_loss": [(1, 10.8125)], "throughput(tps)": []}
    assert got == expected, f"after a resume at step 1: expected {expected}, got {got}"
    print("OK: a resumed writer's purge_step hides the redone steps' earlier points")


if __name__ == "__main__":
    main()
