"""Which of titan's CUDA kernels h200_bench.sh turns off for its training runs
([compile] disabled_kernels), read from cuda_kernels_test's output, so that one broken kernel does
not cost the other kernels' figures.

  kernel_switches.py suspects LOG   kernels whose tests failed, crashed, or never ran because the
                                    binary died (space-separated; empty when the run passed or
                                    never started a test)
  kernel_switches.py filter KERNEL  the --gtest_filter running that kernel's tests alone

A CUDA fault poisons the process, so every test after it fails too: h200_bench.sh runs each
suspect's tests alone and turns off those that fail there."""
import re
import sys

# The kernel each test checks: "Suite" (every test of it) or "Suite.Test".
TESTS = {
    "rope": ["CudaRopeTest"],
    "swiglu": ["CudaSwiGluTest"],
    "float8_cast": ["CudaFloat8CastTest", "CudaFloat8CastShapesTest"],
    "adam": ["CudaFusedAdamTest"],  # its bf16 weight copies too
    "cross_entropy": ["CudaCrossEntropyTest"],
    "mixed_precision_linear": ["CudaDispatchTest.LinearUnderAutocastTakesFp32GradientsFromTheGemm"],
}

# "[ RUN      ] Cases/CudaFusedAdamTest.MatchesAten/0": status, the test's full name, its suite
# and its name without parameters.
LINE = re.compile(r"^\[\s*(RUN|OK|FAILED|SKIPPED)\s*\] ((?:\w+/)?(\w+)\.(\w+)(?:/\w+)?)")


def kernel_of(suite, test):
    for kernel, names in TESTS.items():
        if suite in names or f"{suite}.{test}" in names:
            return kernel
    return None


def suspects(log_text):
    started, ended, bad = {}, set(), set()
    for line in log_text.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        status, name, suite, test = match.groups()
        kernel = kernel_of(suite, test)
        if kernel is None:
            continue
        if status == "RUN":
            started[name] = kernel
        else:
            ended.add(name)
        if status == "FAILED":
            bad.add(kernel)
    bad.update(kernel for name, kernel in started.items() if name not in ended)  # crashed in it
    # gtest's closing line, "[==========] 40 tests from 9 test suites ran. (1234 ms total)", is
    # missing when the binary died: the kernels it never reached are unknown.
    # A binary that never started a test (a missing library, say) says nothing about the kernels.
    if not started and not re.search(r"^\[ RUN", log_text, re.M):
        return []
    if not re.search(r"^\[=+\] \d+ tests? from .* ran\.", log_text, re.M):
        bad.update(kernel for kernel in TESTS if kernel not in started.values())
    return [kernel for kernel in TESTS if kernel in bad]


def gtest_filter(kernel):
    return ":".join(f"*{name}.*" if "." not in name else f"*{name}*" for name in TESTS[kernel])


def main(argv):
    if len(argv) == 3 and argv[1] == "suspects":
        with open(argv[2], errors="replace") as log:
            print(" ".join(suspects(log.read())))
        return 0
    if len(argv) == 3 and argv[1] == "filter" and argv[2] in TESTS:
        print(gtest_filter(argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
