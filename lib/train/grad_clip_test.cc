#include "lib/train/grad_clip.h"

#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"

namespace titan {
namespace {

std::vector<at::Tensor> ParamsWithGrads(std::vector<std::vector<float>> grads) {
  std::vector<at::Tensor> params;
  for (const auto& g : grads) {
    at::Tensor p = at::zeros({static_cast<int64_t>(g.size())}).set_requires_grad(true);
    p.mutable_grad() = at::tensor(g);
    params.push_back(p);
  }
  return params;
}

// As torch.nn.utils.clip_grad_norm_: the norm, then the gradients scaled.
at::Tensor ClipGradNorm(const std::vector<at::Tensor>& params, double max_norm,
                        const SquaredNormReducer& reduce = nullptr) {
  const GradClip clip = ComputeGradClip(params, max_norm, reduce);
  ScaleGrads(params, clip.scale);
  return clip.total_norm;
}

TEST(GradClipTest, ScalesToMaxNormAndReturnsNormBeforeClipping) {
  auto params = ParamsWithGrads({{3.0f}, {4.0f, 0.0f}});
  const GradClip clip = ComputeGradClip(params, 1.0);
  // The gradients are untouched until scaled.
  EXPECT_FLOAT_EQ(params[0].grad()[0].item<float>(), 3.0f);
  EXPECT_NEAR(clip.scale.item<float>(), 1.0f / 5, 1e-6);
  ScaleGrads(params, clip.scale);
  EXPECT_NEAR(clip.total_norm.item<float>(), 5.0f, 1e-6);
  EXPECT_NEAR(params[0].grad()[0].item<float>(), 3.0f / 5, 1e-5);
  EXPECT_NEAR(params[1].grad()[0].item<float>(), 4.0f / 5, 1e-5);
}

// torch's clip_coef, max_norm / (total_norm + 1e-6) in Python: the tensor's reciprocal times
// max_norm, each rounded to fp32. A single division differs in the last bit for about a quarter
// of norms when max_norm is not a power of 2.
TEST(GradClipTest, ScaleHasTheBitsOfTorchsClipCoefficient) {
  at::manual_seed(0);
  for (const double max_norm : {0.3, 5.0}) {
    for (int i = 0; i < 64; ++i) {
      auto params = ParamsWithGrads({{0.0f}});
      params[0].mutable_grad() = at::randn({7}) * std::exp2(i % 9);
      const GradClip clip = ComputeGradClip(params, max_norm);
      const float denominator = clip.total_norm.item<float>() + static_cast<float>(1e-6);
      const float expected =
          std::min(1.0f, (1.0f / denominator) * static_cast<float>(max_norm));
      ASSERT_EQ(clip.scale.item<float>(), expected) << "max_norm " << max_norm << ", case " << i;
    }
  }
}

TEST(GradClipTest, NoScaleWithoutMaxNorm) {
  auto params = ParamsWithGrads({{3.0f}});
  EXPECT_FALSE(ComputeGradClip(params, 0.0).scale.defined());
}

TEST(GradClipTest, LeavesSmallGradientsAlone) {
  auto params = ParamsWithGrads({{0.3f}, {0.4f}});
  ClipGradNorm(params, 1.0);
  EXPECT_FLOAT_EQ(params[0].grad()[0].item<float>(), 0.3f);
}

TEST(GradClipTest, ReducerSeesEachParametersSquaredNormInOrder) {
  auto params = ParamsWithGrads({{3.0f}, {1.0f}, {2.0f, 2.0f}});
  params[1].mutable_grad() = at::Tensor();  // no gradient: 0, in its place
  at::Tensor seen;
  // Another "rank" holds a shard with squared norm 8: total norm sqrt(9 + 8 + 8) = 5.
  at::Tensor norm = ClipGradNorm(params, 100.0, [&seen](const at::Tensor& squares) {
    seen = squares;
    return squares.sum() + 8.0;
  });
  EXPECT_TRUE(at::allclose(seen, at::tensor({9.0f, 0.0f, 8.0f})));
  EXPECT_NEAR(norm.item<float>(), 5.0f, 1e-6);
}

}  // namespace
}  // namespace titan
