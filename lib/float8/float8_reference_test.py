"""Checks titan's Float8Linear against torchao's Float8Linear, forward and backward.

Usage: float8_reference_test.py FLOAT8_LINEAR_BINARY

For each recipe torchtitan names (tensorwise, rowwise, rowwise_with_gw_hp), in fp32 and bf16, the
binary and torchao.float8 (convert_to_float8_training on an nn.Linear, the same config
from_recipe_name gives) run one forward and backward on the same input, weight and output
gradient; the output and both gradients must agree. On CPU the binary runs tensorwise through
at::_scaled_mm and emulated, and the rowwise recipes emulated only (the CPU kernel scales whole
tensors); torchao runs each the same way.

Tolerance: bitwise. titan makes the same ATen calls in the same order as torchao (amax in the
input's dtype, the scale as float64 reciprocal x max, saturating cast, _scaled_mm or the fp32
emulation), so any difference means a cast or a matmul was not mirrored.
"""

import dataclasses
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from torchao.float8 import Float8LinearConfig, convert_to_float8_training

RECIPES = ["tensorwise", "rowwise", "rowwise_with_gw_hp"]
IN_FEATURES, OUT_FEATURES = 64, 48


def make_data(dtype):
    gen = torch.Generator().manual_seed(0)
    # Rows of very different magnitude, so rowwise and tensorwise scales differ.
    x = torch.randn(2, 8, IN_FEATURES, generator=gen) * torch.logspace(-2, 2, 8).view(1, 8, 1)
    weight = torch.randn(OUT_FEATURES, IN_FEATURES, generator=gen) * 0.05
    grad = torch.randn(2, 8, OUT_FEATURES, generator=gen) * 1e-3
    return {"x": x.to(dtype), "weight": weight.to(dtype), "grad": grad.to(dtype)}


def torchao_run(data, recipe, emulate):
    config = dataclasses.replace(Float8LinearConfig.from_recipe_name(recipe), emulate=emulate)
    linear = torch.nn.Linear(IN_FEATURES, OUT_FEATURES, bias=False, dtype=data["weight"].dtype)
    with torch.no_grad():
        linear.weight.copy_(data["weight"])
    model = convert_to_float8_training(torch.nn.Sequential(linear), config=config)
    x = data["x"].clone().requires_grad_(True)
    out = model(x)
    out.backward(data["grad"])
    return {"out": out.detach(), "grad_x": x.grad, "grad_weight": model[0].weight.grad}


def main():
    binary = sys.argv[1]
    failures, compared = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in (torch.float32, torch.bfloat16):
            data = make_data(dtype)
            save_file(data, os.path.join(tmp, "in.safetensors"))
            subprocess.run([binary, os.path.join(tmp, "in.safetensors"),
                            os.path.join(tmp, "out.safetensors")], check=True)
            ours = load_file(os.path.join(tmp, "out.safetensors"))
            ran = {(k.split("/")[0], k.split("/")[1]) for k in ours}
            # What must have run on CPU: tensorwise both ways, the rowwise recipes emulated.
            expected = {("tensorwise", "0"), ("tensorwise", "1"), ("rowwise", "1"),
                        ("rowwise_with_gw_hp", "1")}
            if ran != expected:
                failures.append(f"{dtype}: ran {sorted(ran)}, expected {sorted(expected)}")
            for recipe, emulate in sorted(ran):
                reference = torchao_run(data, recipe, emulate == "1")
                for name, value in reference.items():
                    mine = ours[f"{recipe}/{emulate}/{name}"]
                    compared += 1
                    if mine.dtype != value.dtype or not torch.equal(mine, value):
                        diff = (mine.float() - value.float()).abs().max().item()
                        failures.append(f"{dtype} {recipe} emulate={emulate} {name}: "
                                        f"{mine.dtype} vs {value.dtype}, max diff {diff:.3e}")
                    elif torch.equal(value, torch.zeros_like(value)):
                        failures.append(f"{dtype} {recipe} {name}: all zero, nothing compared")
    for failure in failures:
        print("FAIL", failure)
    print(f"{compared} tensors compared, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
