// The multi-tensor Adam kernel's parts that run here: its per-element math (adam_math.h) against
// ATen's own Adam(W) on the CPU, its split of tensors into chunks, and the wrapper's refusals.
// cuda_kernels_test holds the kernel itself to ATen's CUDA _fused_adamw_, bit for bit.
#include "lib/kernels/adam.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/kernels/adam_math.h"

namespace titan {
namespace {

using testing::HasSubstr;

struct AdamCase {
  bool decoupled;
  double weight_decay;
};

// |got - want| within 8 fp32 roundings (2^-23 relative) of want's largest magnitude: the CPU
// kernel computes in other orders (lerp for the first moment, doubles for the decay), a few
// roundings apart; a wrong formula or a missed scale is orders of magnitude further.
bool WithinRoundings(const at::Tensor& got, const at::Tensor& want) {
  const double scale = want.abs().max().item<double>();
  return (got - want).abs().max().item<double>() <= 8 * 0x1p-23 * scale;
}

class AdamElementTest : public testing::TestWithParam<AdamCase> {};

// Three steps of AdamElement over every element against ATen's fused Adam(W) on the CPU after
// _foreach_mul_ by the scale.
TEST_P(AdamElementTest, MatchesAtenAfterScalingTheGradient) {
  const AdamCase c = GetParam();
  at::manual_seed(0);
  const int64_t n = 4099;
  at::Tensor param = at::randn({n});
  at::Tensor exp_avg = at::zeros({n});
  at::Tensor exp_avg_sq = at::zeros({n});
  const at::Tensor initial = param.clone();
  at::Tensor ref_param = param.clone();
  at::Tensor ref_exp_avg = exp_avg.clone();
  at::Tensor ref_exp_avg_sq = exp_avg_sq.clone();
  at::Tensor ref_step = at::zeros({}, at::kFloat);
  const AdamConstants constants{1e-2f,      0.9f, 0.95f, 1e-8f, static_cast<float>(c.weight_decay),
                                c.decoupled};
  const at::Tensor scale = at::full({}, 0.37f);
  for (int step = 1; step <= 3; ++step) {
    const at::Tensor grad = at::randn({n});
    std::vector<at::Tensor> ref_grads = {grad.clone()};
    at::_foreach_mul_(ref_grads, scale);
    ref_step.add_(1);
    if (c.decoupled) {
      at::_fused_adamw_({ref_param}, ref_grads, {ref_exp_avg}, {ref_exp_avg_sq}, {}, {ref_step},
                        1e-2, 0.9, 0.95, c.weight_decay, 1e-8, false, false, std::nullopt,
                        std::nullopt);
    } else {
      at::_fused_adam_({ref_param}, ref_grads, {ref_exp_avg}, {ref_exp_avg_sq}, {}, {ref_step},
                       1e-2, 0.9, 0.95, c.weight_decay, 1e-8, false, false, std::nullopt,
                       std::nullopt);
    }

    const AdamBiasCorrections bias = AdamBiasCorrectionsFor(constants, static_cast<float>(step));
    float* p = param.data_ptr<float>();
    float* m = exp_avg.data_ptr<float>();
    float* v = exp_avg_sq.data_ptr<float>();
    const float* g = grad.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) AdamElement(constants, bias, 0.37f, g[i], p[i], m[i], v[i]);
  }
  EXPECT_TRUE(WithinRoundings(param, ref_param));
  EXPECT_TRUE(WithinRoundings(exp_avg, ref_exp_avg));
  EXPECT_TRUE(WithinRoundings(exp_avg_sq, ref_exp_avg_sq));
  // The steps moved the parameters: the comparison is not of untouched tensors.
  EXPECT_GT((param - initial).abs().max().item<float>(), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Modes, AdamElementTest,
                         testing::Values(AdamCase{true, 0.1}, AdamCase{false, 0.01},
                                         AdamCase{true, 0.0}));

// Every element of every tensor (empty ones included) lies in exactly one chunk, and a chunk
// stays within its tensor and kAdamChunk elements.
TEST(AdamChunkTest, ChunksCoverEveryElementOnce) {
  const std::vector<int64_t> numel = {
      0, 1, kAdamChunk - 1, kAdamChunk, kAdamChunk + 1, 3 * kAdamChunk, 0, 9000, 0};
  std::vector<int64_t> first_chunk = {0};
  for (int64_t n : numel)
    first_chunk.push_back(first_chunk.back() + (n + kAdamChunk - 1) / kAdamChunk);
  std::vector<std::vector<int>> seen;
  for (int64_t n : numel) seen.emplace_back(n, 0);
  const int count = static_cast<int>(numel.size());
  for (int64_t chunk = 0; chunk < first_chunk.back(); ++chunk) {
    const AdamChunk at = LocateAdamChunk(first_chunk.data(), numel.data(), count, chunk);
    ASSERT_GE(at.tensor, 0);
    ASSERT_LT(at.tensor, count);
    ASSERT_LT(at.begin, at.end) << "chunk " << chunk;
    ASSERT_LE(at.end, numel[at.tensor]);
    ASSERT_LE(at.end - at.begin, kAdamChunk);
    for (int64_t i = at.begin; i < at.end; ++i) ++seen[at.tensor][i];
  }
  for (size_t t = 0; t < numel.size(); ++t) {
    for (int64_t i = 0; i < numel[t]; ++i)
      ASSERT_EQ(seen[t][i], 1) << "tensor " << t << " element " << i;
  }
}

TEST(FusedAdamSupportsTest, RefusesCpuTensorsAndMismatches) {
  const at::Tensor p = at::zeros({4});
  const at::Tensor step = at::zeros({}, at::kFloat);
  EXPECT_THAT(std::string(FusedAdamSupports({p}, {p}, {p}, {p}, {step}, {}).message()),
              HasSubstr("params[0]: expected a CUDA tensor"));
  EXPECT_THAT(std::string(FusedAdamSupports({p}, {}, {p}, {p}, {step}, {}).message()),
              HasSubstr("differ in length"));
}

}  // namespace
}  // namespace titan
