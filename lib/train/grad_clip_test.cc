#include "lib/train/grad_clip.h"

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
