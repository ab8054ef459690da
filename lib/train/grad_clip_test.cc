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

TEST(GradClipTest, ScalesToMaxNormAndReturnsNormBeforeClipping) {
  auto params = ParamsWithGrads({{3.0f}, {4.0f, 0.0f}});
  at::Tensor norm = ClipGradNorm(params, 1.0);
  EXPECT_NEAR(norm.item<float>(), 5.0f, 1e-6);
  EXPECT_NEAR(params[0].grad()[0].item<float>(), 3.0f / 5, 1e-5);
  EXPECT_NEAR(params[1].grad()[0].item<float>(), 4.0f / 5, 1e-5);
}

TEST(GradClipTest, LeavesSmallGradientsAlone) {
  auto params = ParamsWithGrads({{0.3f}, {0.4f}});
  ClipGradNorm(params, 1.0);
  EXPECT_FLOAT_EQ(params[0].grad()[0].item<float>(), 0.3f);
}

TEST(GradClipTest, ReducerSeesSquaredNormOfAllShards) {
  auto params = ParamsWithGrads({{3.0f}});
  // Another "rank" holds a shard with squared norm 16: total norm 5.
  at::Tensor norm = ClipGradNorm(params, 100.0, [](at::Tensor& sq) { sq.add_(16.0); });
  EXPECT_NEAR(norm.item<float>(), 5.0f, 1e-6);
}

}  // namespace
}  // namespace titan
