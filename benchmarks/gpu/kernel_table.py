"""One traced step's GPU time by kernel, read the same way from titan's and torchtitan's Kineto
traces (both write <dump>/profile_traces/iteration_N/rank0_trace.json): the step's span, the time
kernels kept the GPU busy, that time by kind (GEMM, attention, float8 cast, other) and the top
kernels, and the ops that launched them. Usage: kernel_table.py NAME=TRACE.json ... > table.txt"""
import collections
import json
import re
import sys

# First match wins: cuDNN's attention kernels' names hold "sm90" as GEMMs' do.
KINDS = (("attention", re.compile(r"flash|fmha|cudnn|attention|sdpa", re.I)),
         ("gemm", re.compile(r"gemm|nvjet|xmma|cutlass|cublas", re.I)),
         ("float8", re.compile(r"float8|fp8|e4m3|e5m2", re.I)),
         ("copy", re.compile(r"copy|memcpy|memset|fill|cat|transpose", re.I)))


def kind_of(name):
    return next((kind for kind, pattern in KINDS if pattern.search(name)), "other")


def table(label, path):
    events = json.load(open(path)).get("traceEvents", [])
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(
        "ProfilerStep#")]
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") in (
        "kernel", "gpu_memcpy", "gpu_memset")]
    print(f"## {label}: {path}")
    if not kernels:
        print("no device events (the profiler recorded no kernels)\n")
        return
    busy = sum(e["dur"] for e in kernels) / 1e3
    span = (max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)) / 1e3
    host = steps[-1]["dur"] / 1e3 if steps else float("nan")
    print(f"steps traced {len(steps)}; host step {host:.1f} ms; device span {span:.1f} ms; "
          f"kernels busy {busy:.1f} ms ({len(kernels)} launches)")
    by_kind = collections.Counter()
    count_kind = collections.Counter()
    by_name = collections.Counter()
    count_name = collections.Counter()
    for e in kernels:
        name = str(e["name"])
        by_kind[kind_of(name)] += e["dur"] / 1e3
        count_kind[kind_of(name)] += 1
        by_name[name[:110]] += e["dur"] / 1e3
        count_name[name[:110]] += 1
    print("by kind: " + "; ".join(f"{k} {v:.1f} ms ({count_kind[k]})"
                                  for k, v in by_kind.most_common()))
    for name, ms in by_name.most_common(25):
        print(f"  {ms:8.2f} ms {count_name[name]:5d}x  {name}")
    # The op that launched each kernel (Kineto gives both its "External id"), with its most
    # frequent input shapes: which layer's op a copy or a reduction comes from.
    ops = {e["args"]["External id"]: e for e in events
           if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    by_op = collections.Counter()
    count_op = collections.Counter()
    shapes = collections.defaultdict(collections.Counter)
    for e in kernels:
        op = ops.get(e.get("args", {}).get("External id"))
        name = op["name"] if op else "(no launching op)"
        by_op[name] += e["dur"] / 1e3
        count_op[name] += 1
        if op:
            shapes[name][str(op["args"].get("Input Dims", ""))[:90]] += 1
    print("by launching op:")
    for name, ms in by_op.most_common(20):
        common = shapes[name].most_common(1)
        print(f"  {ms:8.2f} ms {count_op[name]:5d}x  {name}  {common[0][0] if common else ''}")
    print()


for argument in sys.argv[1:]:
    label, path = argument.split("=", 1)
    try:
        table(label, path)
    except (OSError, ValueError) as error:
        print(f"## {label}: {path}: {error}\n")
