"""Op microbenchmarks on the GPU at Llama 3 8B's shapes (batch 1 x seq 8192, bf16): the GEMM
ceiling, each SDPA backend (forward, and forward + backward, with and without grouped kv heads),
RMSNorm fused vs composite, AdamW for-loop / foreach / fused, eager and torch.compile where it
applies. Median of timed repeats after warm-up, CUDA events. Each case runs on its own: one that
fails is recorded with its error, and the results file is rewritten after every case."""
import json
import sys

import torch
import torch.nn.functional as F

results = {}


def timed(name, fn, repeats=20, flops=None, calls=1):
    """`calls` per pair of events for short ops, whose launch onto an idle GPU would be timed too."""
    try:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / calls)
        ms = sorted(times)[len(times) // 2]
        results[name] = {"ms": ms}
        if flops:
            results[name]["tflops"] = flops / ms / 1e9
    except Exception as e:  # noqa: BLE001 (a backend or compile failure ends this case only)
        results[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    print(name, json.dumps(results[name]), flush=True)
    with open(sys.argv[1], "w") as f:
        json.dump(results, f, indent=2)


def main():
    dev, bf16 = "cuda", torch.bfloat16
    n = 8192
    a, b = torch.randn(n, n, device=dev, dtype=bf16), torch.randn(n, n, device=dev, dtype=bf16)
    timed("gemm_8192_bf16", lambda: a @ b, flops=2 * n ** 3)
    # Forward, and forward + backward (training's cost, 3.5x the forward's FLOPs), with 32 kv
    # heads and with Llama 3 8B's 8 grouped ones (enable_gqa): which backend titan should prefer.
    attn_flops = 4 * 32 * 8192 * 8192 * 128 / 2  # causal
    q = torch.randn(1, 32, 8192, 128, device=dev, dtype=bf16, requires_grad=True)
    grad = torch.randn(1, 32, 8192, 128, device=dev, dtype=bf16)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for kv_heads in (32, 8):
        k = torch.randn(1, kv_heads, 8192, 128, device=dev, dtype=bf16, requires_grad=True)
        v = torch.randn(1, kv_heads, 8192, 128, device=dev, dtype=bf16, requires_grad=True)
        gqa = kv_heads < 32

        def forward():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                        SDPBackend.EFFICIENT_ATTENTION):
            name = f"sdpa_{backend.name.lower()}_kv{kv_heads}"
            with sdpa_kernel(backend):
                with torch.no_grad():
                    timed(name, forward, flops=attn_flops)
                timed(f"{name}_fwd_bwd", lambda: torch.autograd.grad(forward(), (q, k, v), grad),
                      flops=3.5 * attn_flops)
    x = torch.randn(8192, 4096, device=dev)
    w = torch.ones(4096, device=dev)

    def composite():
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)) * w

    timed("rmsnorm_composite_fp32", composite, calls=10)
    timed("rmsnorm_fused_fp32", lambda: F.rms_norm(x, (4096,), w, 1e-5), calls=10)
    timed("rmsnorm_compiled_fp32", torch.compile(composite), calls=10)
    params = [torch.randn(4096, 4096, device=dev, requires_grad=True) for _ in range(16)]
    for p in params:
        p.grad = torch.randn_like(p)
    for impl in ("for-loop", "foreach", "fused"):
        opt = torch.optim.AdamW(params, lr=1e-4, foreach=impl == "foreach", fused=impl == "fused")
        timed(f"adamw_{impl}_16x4096x4096", opt.step)


if __name__ == "__main__":
    main()
