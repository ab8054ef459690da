#include "lib/train/cuda_graph.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/core/GradMode.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace titan {
namespace {

// An embedding and a projection to the vocabulary: enough for a forward, a loss and gradients.
struct TinyModel {
  explicit TinyModel(const at::Device& device) {
    const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
    at::manual_seed(0);
    embedding = (at::randn({16, 32}) * 0.1).to(options).requires_grad_(true);
    projection = (at::randn({16, 32}) * 0.1).to(options).requires_grad_(true);
  }
  std::vector<ParamRef> refs() { return {{"embedding", &embedding}, {"projection", &projection}}; }
  // Forward, summed cross-entropy, backward of sum / divisor; the sum, detached.
  at::Tensor ForwardBackward(const Batch& batch, double divisor) {
    const at::Tensor logits = at::linear(at::embedding(embedding, batch.tokens), projection);
    const at::Tensor sum = at::cross_entropy_loss(logits.flatten(0, 1), batch.labels.flatten(), {},
                                                  at::Reduction::Sum);
    (sum / divisor).backward();
    return sum.detach();
  }
  void Sgd() {
    c10::NoGradGuard no_grad;
    for (at::Tensor* p : {&embedding, &projection}) p->sub_(p->grad() * 0.1);
  }
  at::Tensor embedding;
  at::Tensor projection;
};

Batch MakeBatch(int64_t seed, int64_t seq_len, const at::Device& device) {
  at::manual_seed(seed);
  Batch batch;
  batch.tokens = at::randint(16, {4, seq_len}, at::kLong).to(device);
  batch.labels = at::randint(16, {4, seq_len}, at::kLong).to(device);
  return batch;
}

TEST(CudaGraphedMicrobatchTest, RunsEagerlyThenRefusesToCaptureOffTheGpu) {
  const at::Device cpu(at::kCPU);
  TinyModel model(cpu);
  CudaGraphedMicrobatch graphed(model.refs(), /*eager_steps=*/1);
  auto body = [&](const Batch& batch) { return model.ForwardBackward(batch, 32.0); };
  absl::StatusOr<at::Tensor> eager = graphed.Run(true, MakeBatch(1, 8, cpu), 32.0, body);
  ASSERT_TRUE(eager.ok()) << eager.status();
  EXPECT_TRUE(model.embedding.grad().defined());
  const absl::StatusOr<at::Tensor> captured = graphed.Run(true, MakeBatch(2, 8, cpu), 32.0, body);
  ASSERT_FALSE(captured.ok());
  EXPECT_NE(std::string(captured.status().message()).find("needs the batch on a CUDA device"),
            std::string::npos)
      << captured.status();
}

TEST(CudaGraphedMicrobatchTest, DocumentMasksAreRefused) {
  const at::Device cpu(at::kCPU);
  TinyModel model(cpu);
  CudaGraphedMicrobatch graphed(model.refs(), /*eager_steps=*/1);
  Batch batch = MakeBatch(1, 8, cpu);
  batch.documents = at::zeros({4, 8}, at::kLong);
  const absl::StatusOr<at::Tensor> result = graphed.Run(
      true, batch, 32.0, [&](const Batch& b) { return model.ForwardBackward(b, 32.0); });
  ASSERT_FALSE(result.ok());
  EXPECT_NE(std::string(result.status().message()).find("document masks"), std::string::npos);
}

// Replays equal eager execution bit for bit (the same kernels on the same inputs), with two
// microbatches per step accumulating into the gradients, and later batches of another shape or
// another loss divisor are refused.
TEST(CudaGraphedMicrobatchTest, ReplaysEqualEagerStepsOnTheGpu) {
  if (!at::cuda::is_available()) {
    GTEST_SKIP() << "no CUDA device: CUDA graphs were compiled and linked, not run";
  }
  const at::Device cuda(at::kCUDA, 0);
  constexpr double kDivisor = 64.0;
  TinyModel eager(cuda);
  TinyModel graphed_model(cuda);
  CudaGraphedMicrobatch graphed(graphed_model.refs(), /*eager_steps=*/1);
  auto body = [&](const Batch& batch) { return graphed_model.ForwardBackward(batch, kDivisor); };
  for (int64_t step = 0; step < 4; ++step) {
    for (TinyModel* model : {&eager, &graphed_model}) {
      for (at::Tensor* p : {&model->embedding, &model->projection}) {
        if (model == &eager) {
          p->mutable_grad().reset();
        } else if (p->grad().defined()) {
          p->mutable_grad().zero_();
        }
      }
    }
    for (int64_t m = 0; m < 2; ++m) {
      const Batch batch = MakeBatch(10 * step + m, 8, cuda);
      const at::Tensor want = eager.ForwardBackward(batch, kDivisor);
      absl::StatusOr<at::Tensor> got = graphed.Run(m == 0, batch, kDivisor, body);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(at::equal(*got, want)) << "step " << step << " microbatch " << m;
    }
    eager.Sgd();
    graphed_model.Sgd();
  }
  EXPECT_TRUE(at::equal(graphed_model.embedding, eager.embedding));
  EXPECT_TRUE(at::equal(graphed_model.projection, eager.projection));
  const absl::StatusOr<at::Tensor> reshaped = graphed.Run(true, MakeBatch(99, 9, cuda), kDivisor,
                                                          body);
  ASSERT_FALSE(reshaped.ok());
  EXPECT_NE(std::string(reshaped.status().message()).find("static shapes"), std::string::npos);
  const absl::StatusOr<at::Tensor> redivided = graphed.Run(true, MakeBatch(99, 8, cuda), 1.0, body);
  ASSERT_FALSE(redivided.ok());
  EXPECT_NE(std::string(redivided.status().message()).find("loss divisor changed"),
            std::string::npos);
}

}  // namespace
}  // namespace titan
