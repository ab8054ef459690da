"""Checks that TensorBoard's own reader accepts what TensorBoardWriter writes.

Usage: tensorboard_reader_test.py WRITE_SCALAR_EVENTS_BINARY
"""

import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError:
    sys.exit("tensorboard is not installed in the test environment: tools/setup.sh must pin it")

# (tag, step, value): tags the trainer logs, a value float32 cannot hold exactly, a negative one.
SCALARS = [
    ("loss_metrics/global_avg_loss", 1, 10.8125),
    ("loss_metrics/global_avg_loss", 2, 9.123456789),
    ("lr", 1, 8e-4),
    ("lr", 2, 7.5e-4),
    ("throughput(tps)", 2, 12345.0),
    ("mfu(%)", 2, 0.05),
    ("memory/max_reserved(GiB)", 2, 0.52),
    ("validation_metrics/loss", 2, -3.5),
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


if __name__ == "__main__":
    main()
