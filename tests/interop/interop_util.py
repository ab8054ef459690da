"""What the interop tests share: running the tools and reading Hugging Face folders back."""
import glob
import json
import os
import subprocess

import transformers
from safetensors.torch import load_file

# Keys transformers stamps with its own version or derives on load: not part of the model.
VOLATILE_CONFIG_KEYS = {"transformers_version", "_name_or_path"}


def run(cmd, timeout=600):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def convert(tool, src, dst, *flags):
    """convert_checkpoint's --json summary of src -> dst."""
    return json.loads(run([tool, "--json", *flags, src, dst]).stdout)


def hf_tensors(folder):
    tensors = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        tensors.update(load_file(path))
    return tensors


def config_dict(folder):
    config = transformers.AutoConfig.from_pretrained(folder).to_dict()
    return {k: v for k, v in config.items() if k not in VOLATILE_CONFIG_KEYS}
