"""torchtitan 0.2.2's trainer with one more Llama 3 flavor, "8B_8L" (8B's shapes, 8 layers), so both
sides of the benchmark train the same model. Run as torchtitan.train is: torchrun ... this file
--job.config_file ... (flags as torchtitan's)."""
import copy

from torchtitan.models.llama3 import llama3_args
from torchtitan.train import Trainer, main

if __name__ == "__main__":
    flavor = copy.deepcopy(llama3_args["8B"])
    flavor.n_layers = 8
    llama3_args["8B_8L"] = flavor
    main(Trainer)
