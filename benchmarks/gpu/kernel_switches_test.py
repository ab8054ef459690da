"""kernel_switches.py on gtest outputs shaped as cuda_kernels_test's: a pass, failures, a crash."""
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernel_switches  # noqa: E402

PASSED = """[==========] Running 4 tests from 3 test suites.
[ RUN      ] CudaRopeTest.MatchesAten
[       OK ] CudaRopeTest.MatchesAten (12 ms)
[ RUN      ] Cases/CudaFusedAdamTest.MatchesAten/0
[       OK ] Cases/CudaFusedAdamTest.MatchesAten/0 (40 ms)
[ RUN      ] CudaDispatchTest.LinearUnderAutocastTakesFp32GradientsFromTheGemm
[       OK ] CudaDispatchTest.LinearUnderAutocastTakesFp32GradientsFromTheGemm (3 ms)
[ RUN      ] CudaRmsNormTest.FusedMatchesComposition
[       OK ] CudaRmsNormTest.FusedMatchesComposition (2 ms)
[==========] 4 tests from 3 test suites ran. (57 ms total)
[  PASSED  ] 4 tests.
"""


class SuspectsTest(unittest.TestCase):
    def test_a_passing_run_turns_nothing_off(self):
        self.assertEqual(kernel_switches.suspects(PASSED), [])

    def test_failed_tests_name_their_kernels(self):
        log = PASSED.replace(
            "[       OK ] Cases/CudaFusedAdamTest.MatchesAten/0 (40 ms)",
            "x.cc:12: Failure\n[  FAILED  ] Cases/CudaFusedAdamTest.MatchesAten/0, where "
            "GetParam() = 8-byte object (40 ms)").replace(
            "[       OK ] CudaDispatchTest.LinearUnderAutocastTakesFp32GradientsFromTheGemm",
            "[  FAILED  ] CudaDispatchTest.LinearUnderAutocastTakesFp32GradientsFromTheGemm")
        self.assertEqual(kernel_switches.suspects(log), ["adam", "mixed_precision_linear"])

    def test_a_failure_outside_the_kernels_turns_nothing_off(self):
        log = PASSED.replace("[       OK ] CudaRmsNormTest", "[  FAILED  ] CudaRmsNormTest")
        self.assertEqual(kernel_switches.suspects(log), [])

    def test_a_crash_suspects_its_kernel_and_every_kernel_it_never_reached(self):
        # The binary died inside the second Adam test: rope and the first Adam test passed.
        log = ("[ RUN      ] CudaRopeTest.MatchesAten\n[       OK ] CudaRopeTest.MatchesAten\n"
               "[ RUN      ] Cases/CudaFusedAdamTest.MatchesAten/0\n"
               "[       OK ] Cases/CudaFusedAdamTest.MatchesAten/0\n"
               "[ RUN      ] Cases/CudaFusedAdamTest.MatchesAten/1\n"
               "CUDA error: an illegal memory access was encountered\n")
        self.assertEqual(kernel_switches.suspects(log),
                         ["swiglu", "float8_cast", "adam", "cross_entropy",
                          "mixed_precision_linear"])


    def test_a_binary_that_never_started_says_nothing(self):
        log = "bin/cuda_kernels_test: error while loading shared libraries: libglog.so.1\n"
        self.assertEqual(kernel_switches.suspects(log), [])


class CommandLineTest(unittest.TestCase):
    def run_script(self, *args):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_switches.py")
        return subprocess.run([sys.executable, script, *args], capture_output=True, text=True)

    def test_filters_select_a_kernels_tests(self):
        self.assertEqual(self.run_script("filter", "float8_cast").stdout.strip(),
                         "*CudaFloat8CastTest.*:*CudaFloat8CastShapesTest.*")
        self.assertEqual(
            self.run_script("filter", "mixed_precision_linear").stdout.strip(),
            "*CudaDispatchTest.LinearUnderAutocastTakesFp32GradientsFromTheGemm*")

    def test_suspects_reads_a_log_and_bad_usage_fails(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as log:
            log.write(PASSED.replace("[       OK ] CudaRopeTest", "[  FAILED  ] CudaRopeTest"))
        self.assertEqual(self.run_script("suspects", log.name).stdout.strip(), "rope")
        self.assertEqual(self.run_script("filter", "flash").returncode, 2)


if __name__ == "__main__":
    unittest.main()
