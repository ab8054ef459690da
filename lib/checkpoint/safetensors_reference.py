"""Reference side of safetensors_interop_test: PyPI safetensors reads and writes files for C++.

  resave <in> <out> <dump.json>  load <in> with load_file, save it again with save_file, dump it
  write <out> <dump.json>        save tensors of every dtype with save_file, dump them
A dump maps each name to its dtype, shape and hex bytes, taken independently of safetensors.
"""
import json
import sys

import torch
from safetensors import safe_open
from safetensors.torch import _TYPES, load_file, save_file

DTYPE_NAMES = {dtype: name for name, dtype in _TYPES.items()}  # The reference's own dtype table.


def dump(tensors, path):
    out = {}
    for name, t in tensors.items():
        raw = t.contiguous().reshape(-1).view(torch.uint8)
        out[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape),
                     "hex": bytes(raw.tolist()).hex()}
    with open(path, "w") as f:
        json.dump(out, f)


def random_tensor(dtype, shape, generator):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    item = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, shape[:-1] + (shape[-1] * item,), generator=generator,
                        dtype=torch.uint8)
    return raw.view(dtype)


def write(out, dump_path):
    generator = torch.Generator().manual_seed(1234)
    tensors = {f"layer.{i}.{name}": random_tensor(dtype, (2, 3), generator)
               for i, (name, dtype) in enumerate(_TYPES.items())}
    tensors["scalar"] = torch.tensor(3.5, dtype=torch.bfloat16)
    tensors["empty"] = torch.zeros((0, 4), dtype=torch.float32)
    save_file(tensors, out, metadata={"format": "pt"})
    dump(tensors, dump_path)


def resave(src, out, dump_path):
    tensors = load_file(src)
    with safe_open(src, framework="pt") as f:
        metadata = f.metadata()
    save_file(tensors, out, metadata=metadata)
    dump(tensors, dump_path)


if __name__ == "__main__":
    {"write": write, "resave": resave}[sys.argv[1]](*sys.argv[2:])
