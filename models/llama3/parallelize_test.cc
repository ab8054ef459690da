#include "models/llama3/parallelize.h"

#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "gtest/gtest.h"

namespace titan {
namespace {

// Wraps the CPU allocator to track live and peak bytes, so a test can see activations being freed.
class CountingAllocator : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}

  c10::DataPtr allocate(size_t n) override {
    auto* block = new Block{base_->allocate(n), n, this};
    live_ += static_cast<int64_t>(n);
    peak_ = std::max(peak_.load(), live_.load());
    return {block->inner.get(), block, &Free, block->inner.device()};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  void ResetPeak() { peak_ = live_.load(); }
  int64_t live() const { return live_; }
  int64_t peak() const { return peak_; }

 private:
  struct Block {
    c10::DataPtr inner;
    size_t size;
    CountingAllocator* owner;
  };
  static void Free(void* ctx) {
    auto* block = static_cast<Block*>(ctx);
    block->owner->live_ -= static_cast<int64_t>(block->size);
    delete block;
  }

  c10::Allocator* base_;
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
};

struct RunResult {
  int64_t saved_bytes;  // live memory held between forward and backward
  std::vector<at::Tensor> grads;
};

RunResult ForwardBackward(const std::string& mode, const std::string& option) {
  static CountingAllocator* counter = [] {
    auto* c = new CountingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(c, /*priority=*/100);
    return c;
  }();
  Llama3Args args = Llama3Flavor("debugmodel").value();
  args.n_layers = 4;
  args.vocab_size = 64;
  args.max_seq_len = 256;
  at::manual_seed(0);
  Llama3Model model(args, at::TensorOptions().device(at::kMeta));
  model.Materialize(at::TensorOptions().dtype(at::kFloat));
  model.InitWeights();
  EXPECT_TRUE(ApplyActivationCheckpointing(model, mode, option).ok());
  at::Tensor tokens = at::randint(0, 64, {4, 256}, at::kLong);
  const int64_t before = counter->live();
  at::Tensor loss = at::cross_entropy_loss(model.Forward(tokens).view({-1, 64}), tokens.view({-1}));
  RunResult result{counter->live() - before, {}};
  loss.backward();
  for (const ParamRef& p : model.NamedParameters()) result.grads.push_back(p.tensor->grad());
  return result;
}

TEST(ActivationCheckpointTest, FullCheckpointingFreesActivationsAndKeepsGradients) {
  RunResult plain = ForwardBackward("none", "");
  RunResult full = ForwardBackward("full", "");
  RunResult every2 = ForwardBackward("selective", "2");
  // Without AC each block keeps tens of MiB of activations; with AC only block inputs stay.
  EXPECT_LT(full.saved_bytes, plain.saved_bytes / 3)
      << "plain " << plain.saved_bytes << " full " << full.saved_bytes;
  EXPECT_LT(every2.saved_bytes, plain.saved_bytes);
  EXPECT_GT(every2.saved_bytes, full.saved_bytes);
  ASSERT_EQ(plain.grads.size(), full.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    // Recomputation runs the same kernels on the same inputs: gradients match to fp32 rounding.
    EXPECT_TRUE(at::allclose(plain.grads[i], full.grads[i], 1e-5, 1e-7)) << i;
    EXPECT_TRUE(at::allclose(plain.grads[i], every2.grads[i], 1e-5, 1e-7)) << i;
  }
}

TEST(ActivationCheckpointTest, RejectsUnknownModesWithTheKeyName) {
  Llama3Args args = Llama3Flavor("debugmodel").value();
  Llama3Model model(args, at::TensorOptions().device(at::kMeta));
  absl::Status bad_mode = ApplyActivationCheckpointing(model, "most", "");
  EXPECT_NE(bad_mode.message().find("[activation_checkpoint] mode"), std::string::npos);
  EXPECT_FALSE(ApplyActivationCheckpointing(model, "selective", "zero").ok());
  EXPECT_EQ(ApplyActivationCheckpointing(model, "selective", "op").code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace titan
