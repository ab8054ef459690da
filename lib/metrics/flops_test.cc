#include "lib/metrics/flops.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

namespace titan {
namespace {

// A Llama-style toy: vocab 100, dim 32, 2 layers, 4 heads of 8, FFN hidden 64, untied output.
//   embedding      100 * 32                                   =  3,200
//   per layer      attention 4 * 32 * 32 = 4,096
//                  SwiGLU 3 * 32 * 64 = 6,144, 2 norms 2 * 32 = 64   -> 10,304 (x2 = 20,608)
//   final norm     32
//   output         32 * 100                                   =  3,200
//   total 27,040, of which not embedding 23,840.
// FLOPs/token = 6 * 23,840 + 12 * 2 * 4 * 8 * 16 = 143,040 + 12,288 = 155,328.
TEST(NumFlopsPerTokenTest, MatchesHandCountForToyLlama) {
  DenseTransformerShape shape;
  shape.num_params = 27040;
  shape.num_embedding_params = 3200;
  shape.n_layers = 2;
  shape.n_heads = 4;
  shape.head_dim = 8;
  shape.seq_len = 16;
  EXPECT_EQ(NumFlopsPerToken(shape), 155328);
}

TEST(NumFlopsPerTokenTest, TiedOutputHeadStillCountsItsMatmul) {
  DenseTransformerShape shape;
  shape.num_params = 27040;  // the table counted once
  shape.num_embedding_params = 3200;
  shape.n_layers = 2;
  shape.n_heads = 4;
  shape.head_dim = 8;
  shape.seq_len = 16;
  shape.tied_output = true;
  // Untied it would be 155,328 with the head's 3,200 weights among num_params: the same matmuls.
  EXPECT_EQ(NumFlopsPerToken(shape), 155328 + 6 * 3200);
}

// Llama 3 8B (8,030,261,248 parameters, 128,256 x 4,096 embedding) at seq_len 8,192, beyond int32:
// 6 * 7,504,924,672 + 12 * 32 * 32 * 128 * 8,192 = 45,029,548,032 + 12,884,901,888.
TEST(NumFlopsPerTokenTest, Llama3EightBillionDoesNotOverflow) {
  DenseTransformerShape shape;
  shape.num_params = 8030261248;
  shape.num_embedding_params = 128256LL * 4096;
  shape.n_layers = 32;
  shape.n_heads = 32;
  shape.head_dim = 128;
  shape.seq_len = 8192;
  EXPECT_EQ(NumFlopsPerToken(shape), 57914449920);
}

TEST(PeakFlopsTest, KnownDevicesByTheNamesTheirDriversReport) {
  EXPECT_EQ(PeakFlops("NVIDIA A100-SXM4-80GB", MatmulDtype::kBfloat16), 312e12);
  EXPECT_EQ(PeakFlops("NVIDIA H100 80GB HBM3", MatmulDtype::kBfloat16), 989e12);
  EXPECT_EQ(PeakFlops("NVIDIA H100 PCIe", MatmulDtype::kBfloat16), 756e12);
  EXPECT_EQ(PeakFlops("NVIDIA H100 NVL", MatmulDtype::kBfloat16), 835e12);
  EXPECT_EQ(PeakFlops("NVIDIA H200", MatmulDtype::kBfloat16), 989e12);
  EXPECT_EQ(PeakFlops("NVIDIA B200", MatmulDtype::kBfloat16), 2.25e15);
  EXPECT_EQ(PeakFlops("NVIDIA GB200", MatmulDtype::kBfloat16), 2.5e15);
  EXPECT_EQ(PeakFlops("AMD Instinct MI300X", MatmulDtype::kBfloat16), 1307.4e12);
}

TEST(PeakFlopsTest, MatchIgnoresCase) {
  EXPECT_EQ(PeakFlops("nvidia h100 pcie", MatmulDtype::kBfloat16), 756e12);
}

TEST(PeakFlopsTest, Float32UsesTheNonTensorCorePeak) {
  EXPECT_EQ(PeakFlops("NVIDIA A100-SXM4-40GB", MatmulDtype::kFloat32), 19.5e12);
  EXPECT_EQ(PeakFlops("NVIDIA H100 80GB HBM3", MatmulDtype::kFloat32), 67e12);
  EXPECT_EQ(PeakFlops("NVIDIA B200", MatmulDtype::kFloat32), 0);
}

TEST(PeakFlopsTest, UnknownDevicesAndCpuReportZero) {
  EXPECT_EQ(PeakFlops("cpu", MatmulDtype::kBfloat16), 0);
  EXPECT_EQ(PeakFlops("NVIDIA GeForce GTX 1080", MatmulDtype::kBfloat16), 0);
  EXPECT_EQ(PeakFlops("", MatmulDtype::kFloat32), 0);
}

TEST(ComputeThroughputTest, TokensFlopsAndMfu) {
  // 1,000 tokens in 0.5 s at 155,328 FLOPs/token on an A100.
  const Throughput throughput = ComputeThroughput(1000, 0.5, 155328, 312e12);
  EXPECT_DOUBLE_EQ(throughput.tokens_per_second, 2000.0);
  EXPECT_DOUBLE_EQ(throughput.tflops, 2000.0 * 155328 / 1e12);
  EXPECT_DOUBLE_EQ(throughput.mfu_percent.value_or(0), 100.0 * 2000.0 * 155328 / 312e12);
}

TEST(ComputeThroughputTest, UnknownPeakOrNoTimeGivesNoMfu) {
  EXPECT_FALSE(ComputeThroughput(1000, 0.5, 155328, 0).mfu_percent.has_value());
  EXPECT_DOUBLE_EQ(ComputeThroughput(1000, 0.5, 155328, 0).tokens_per_second, 2000.0);
  const Throughput zero_time = ComputeThroughput(1000, 0, 155328, 312e12);
  EXPECT_EQ(zero_time.tokens_per_second, 0);
  EXPECT_FALSE(zero_time.mfu_percent.has_value());
}

TEST(PeakRssGiBTest, CountsTouchedMemory) {
  constexpr size_t kBytes = 64 << 20;
  std::unique_ptr<char[]> buffer(new char[kBytes]);
  std::memset(buffer.get(), 1, kBytes);
  EXPECT_GE(PeakRssGiB(), 64.0 / 1024.0);
  EXPECT_LT(PeakRssGiB(), 64.0);
  EXPECT_EQ(buffer[kBytes - 1], 1);
}

TEST(StopwatchTest, LapReturnsElapsedAndRestarts) {
  Stopwatch stopwatch;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_GE(stopwatch.ElapsedSeconds(), 0.05);
  const double lap = stopwatch.Lap();
  EXPECT_GE(lap, 0.05);
  EXPECT_LT(stopwatch.ElapsedSeconds(), lap);
}

}  // namespace
}  // namespace titan
