"""torchtitan 0.2.2's trainer with one more Llama 3 flavor, "8B_8L" (8B's shapes, 8 layers), so both
sides of the benchmark train the same model. Run as torchtitan.train is: torchrun ... this file
--job.config_file ... (flags as torchtitan's). With BENCH_TINY=1 (h200_bench.sh's dry run) the
flavor is make_assets.py's tiny shape, and without a GPU torchtitan runs on the CPU."""
import copy
import os
import types

import torch
import torch._utils

TINY = os.environ.get("BENCH_TINY") == "1"
if TINY and not torch.cuda.is_available():
    # torchtitan reads its device type at import and asks torch.cuda for memory figures.
    torch._utils._get_available_device_type = lambda: "cpu"
    for name, fn in dict(get_device_name=lambda *a: "cpu", current_device=lambda: 0,
                         get_device_properties=lambda *a: types.SimpleNamespace(total_memory=1 << 30),
                         reset_peak_memory_stats=lambda *a: None, empty_cache=lambda: None,
                         memory_stats=lambda *a: {}).items():
        setattr(torch.cpu, name, fn)

from torchtitan.models.llama3 import llama3_args  # noqa: E402
from torchtitan.train import Trainer, main  # noqa: E402

if __name__ == "__main__":
    flavor = copy.deepcopy(llama3_args["8B"])
    flavor.n_layers = 8
    if TINY:
        flavor.dim, flavor.n_layers, flavor.n_heads, flavor.n_kv_heads = 256, 2, 8, 2
        flavor.ffn_dim_multiplier, flavor.multiple_of = None, 256  # hidden 768, as config.json
    llama3_args["8B_8L"] = flavor
    main(Trainer)
