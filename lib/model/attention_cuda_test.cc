// CUDA attention against at::scaled_dot_product_attention in fp32 and its autograd: the kernel pair
// ring attention calls directly (AttentionKernelForward/Backward) with a mask (the efficient kernel
// wants the bias broadcast over heads and its rows aligned, which the CPU kernel does not), the
// selective-checkpoint replay, and which kernels grouped-query attention takes.
// Without a CUDA device every test skips; benchmarks/gpu/h200_bench.sh runs this binary.
#include <ATen/SDPBackend.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/core/GradMode.h>

#include <vector>

#include "gtest/gtest.h"
#include "lib/model/attention.h"
#include "lib/model/op_cache.h"

namespace titan {
namespace {

double RelativeError(const at::Tensor& value, const at::Tensor& reference) {
  return ((value.to(at::kFloat) - reference).norm() / reference.norm()).item<double>();
}

class AttentionCudaTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!at::cuda::is_available()) {
      GTEST_SKIP() << "no CUDA device: the CUDA attention path was compiled and linked, not run";
    }
  }
  const at::TensorOptions cuda_ = at::TensorOptions().device(at::kCUDA);
  // 45 keys: the bias rows are not 16-aligned.
  static constexpr int64_t kBatch = 2, kHeads = 4, kSeqLen = 45, kHeadDim = 64;
};

// Causal within two packed documents, so whole blocks of keys are masked: [B, 1, Sq, Sk].
AttentionMask TwoDocumentMask(const at::TensorOptions& options, int64_t b, int64_t s) {
  const at::Tensor position = at::arange(s, options.dtype(at::kLong));
  const at::Tensor document = (position >= 20).to(at::kLong);
  MaskInputs inputs;
  inputs.query_positions = inputs.key_positions = position.expand({b, s});
  inputs.query_documents = inputs.key_documents = document.expand({b, s});
  return BuildAttentionMask(inputs);
}

TEST_F(AttentionCudaTest, MaskedGroupedQueryAttentionEqualsSdpa) {
  at::manual_seed(0);
  const at::Tensor q = at::randn({kBatch, kHeads, kSeqLen, kHeadDim}, cuda_);
  const at::Tensor k = at::randn({kBatch, kHeads / 2, kSeqLen, kHeadDim}, cuda_);
  const at::Tensor v = at::randn({kBatch, kHeads / 2, kSeqLen, kHeadDim}, cuda_);
  const AttentionMask mask = TwoDocumentMask(cuda_, kBatch, kSeqLen);
  const at::Tensor qh = q.to(at::kBFloat16), kh = k.to(at::kBFloat16), vh = v.to(at::kBFloat16);
  const at::Tensor out = Attention(qh, kh, vh, mask);
  const at::Tensor reference = at::scaled_dot_product_attention(
      q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), mask.allowed, 0.0, false);
  EXPECT_LT(RelativeError(out, reference), 2e-2);  // bf16 against fp32
  // What Attention hands SDPA (heads repeated, the mask as a bias) takes a fused kernel, not the
  // math one with its [B, H, S, S] scores.
  const int64_t math = static_cast<int64_t>(at::SDPBackend::math);
  EXPECT_NE(at::_fused_sdp_choice(qh, RepeatKvHeads(kh, 2), RepeatKvHeads(vh, 2),
                                  AttentionBias(mask, at::kBFloat16), 0.0, false),
            math);
}

TEST_F(AttentionCudaTest, KernelPairWithAMaskEqualsSdpa) {
  at::manual_seed(0);
  const std::vector<int64_t> shape = {kBatch, kHeads, kSeqLen, kHeadDim};
  const at::Tensor q = at::randn(shape, cuda_);
  const at::Tensor k = at::randn(shape, cuda_);
  const at::Tensor v = at::randn(shape, cuda_);
  const at::Tensor grad = at::randn(shape, cuda_);
  const AttentionMask mask = TwoDocumentMask(cuda_, kBatch, kSeqLen);

  const at::ScalarType bf16 = at::kBFloat16;
  const at::Tensor qh = q.to(bf16), kh = k.to(bf16), vh = v.to(bf16);
  const std::optional<at::Tensor> bias = AttentionBias(mask, bf16);
  ASSERT_TRUE(bias.has_value());
  const auto [out, lse] = AttentionKernelForward(qh, kh, vh, bias, /*is_causal=*/false);
  const auto [dq, dk, dv] =
      AttentionKernelBackward(grad.to(bf16), qh, kh, vh, out, lse, bias, /*is_causal=*/false);

  const at::Tensor q_leaf = q.clone().set_requires_grad(true);
  const at::Tensor k_leaf = k.clone().set_requires_grad(true);
  const at::Tensor v_leaf = v.clone().set_requires_grad(true);
  const at::Tensor reference =
      at::scaled_dot_product_attention(q_leaf, k_leaf, v_leaf, mask.allowed, 0.0, false);
  reference.backward(grad);
  // bf16 inputs and outputs (2^-8 per rounding) against fp32: a lost mask is off by O(1).
  EXPECT_LT(RelativeError(out, reference.detach()), 2e-2);
  EXPECT_LT(RelativeError(dq, q_leaf.grad()), 3e-2);
  EXPECT_LT(RelativeError(dk, k_leaf.grad()), 3e-2);
  EXPECT_LT(RelativeError(dv, v_leaf.grad()), 3e-2);
}

// Op-level selective checkpointing keeps causal grouped-query attention's results from the flash
// kernel, with the kv heads as they are, and replays them with its backward: the kept output, and
// gradients equal to SDPA's autograd in fp32 on repeated heads.
TEST_F(AttentionCudaTest, SelectiveCheckpointReplayEqualsSdpa) {
  at::manual_seed(0);
  const at::Tensor q = at::randn({kBatch, kHeads, kSeqLen, kHeadDim}, cuda_);
  const at::Tensor k = at::randn({kBatch, kHeads / 2, kSeqLen, kHeadDim}, cuda_);
  const at::Tensor v = at::randn({kBatch, kHeads / 2, kSeqLen, kHeadDim}, cuda_);
  const at::Tensor grad = at::randn({kBatch, kHeads, kSeqLen, kHeadDim}, cuda_);
  const AttentionMask causal;
  const at::ScalarType bf16 = at::kBFloat16;
  OpCache cache;
  at::Tensor recorded;
  {
    c10::NoGradGuard no_grad;  // the checkpointed forward
    OpCacheScope scope(&cache, OpCache::Mode::kRecord);
    recorded = Attention(q.to(bf16), k.to(bf16), v.to(bf16), causal);
  }
  cache.StartReplay();
  const at::Tensor qh = q.to(bf16).set_requires_grad(true);
  const at::Tensor kh = k.to(bf16).set_requires_grad(true);
  const at::Tensor vh = v.to(bf16).set_requires_grad(true);
  at::Tensor replayed;
  {
    OpCacheScope scope(&cache, OpCache::Mode::kReplay);  // backward's recomputation
    replayed = Attention(qh, kh, vh, causal);
  }
  replayed.backward(grad.to(bf16));

  const at::Tensor q_leaf = q.clone().set_requires_grad(true);
  const at::Tensor k_leaf = k.clone().set_requires_grad(true);
  const at::Tensor v_leaf = v.clone().set_requires_grad(true);
  const at::Tensor reference =
      at::scaled_dot_product_attention(q_leaf, k_leaf.repeat_interleave(2, 1),
                                       v_leaf.repeat_interleave(2, 1), std::nullopt, 0.0, true);
  reference.backward(grad);
  EXPECT_TRUE(at::equal(replayed, recorded));
  EXPECT_LT(RelativeError(recorded, reference.detach()), 2e-2);
  EXPECT_LT(RelativeError(qh.grad(), q_leaf.grad()), 3e-2);
  EXPECT_LT(RelativeError(kh.grad(), k_leaf.grad()), 3e-2);
  EXPECT_LT(RelativeError(vh.grad(), v_leaf.grad()), 3e-2);
}

// fp32 grouped-query attention without a mask takes a fused kernel (the efficient one, on
// repeated heads), not the math kernel and its [B, H, S, S] scores.
TEST_F(AttentionCudaTest, Fp32GroupedQueryAttentionTakesAFusedKernel) {
  at::manual_seed(0);
  const at::Tensor q = at::randn({kBatch, kHeads, kSeqLen, kHeadDim}, cuda_);
  const at::Tensor k = at::randn({kBatch, kHeads / 2, kSeqLen, kHeadDim}, cuda_);
  const at::Tensor v = at::randn({kBatch, kHeads / 2, kSeqLen, kHeadDim}, cuda_);
  const AttentionMask causal;
  const at::Tensor out = Attention(q, k, v, causal);
  const at::Tensor reference = at::scaled_dot_product_attention(
      q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), std::nullopt, 0.0, true);
  EXPECT_LT(RelativeError(out, reference), 1e-5);
  const int64_t math = static_cast<int64_t>(at::SDPBackend::math);
  EXPECT_EQ(at::_fused_sdp_choice(q, k, v, std::nullopt, 0.0, true, std::nullopt,
                                  /*enable_gqa=*/true),
            math);  // what Attention must not hand SDPA
  EXPECT_NE(
      at::_fused_sdp_choice(q, RepeatKvHeads(k, 2), RepeatKvHeads(v, 2), std::nullopt, 0.0, true),
      math);
}

// A decode step on a KV cache: one query per sequence over grouped kv heads (folded into rows,
// the efficient kernel called directly), keys a slice of a longer cache, the second sequence's
// first keys left padding: SDPA's result on repeated heads in fp32.
TEST_F(AttentionCudaTest, DecodeStepOnGroupedHeadsEqualsSdpa) {
  at::manual_seed(0);
  c10::NoGradGuard no_grad;
  const at::Tensor cache_k = at::randn({kBatch, kHeads / 2, 64, kHeadDim}, cuda_);
  const at::Tensor cache_v = at::randn({kBatch, kHeads / 2, 64, kHeadDim}, cuda_);
  const at::Tensor k = cache_k.slice(2, 0, kSeqLen), v = cache_v.slice(2, 0, kSeqLen);
  const at::Tensor q = at::randn({kBatch, 1, kHeads, kHeadDim}, cuda_).transpose(1, 2);
  MaskInputs inputs;
  inputs.key_positions = at::arange(kSeqLen, cuda_.dtype(at::kLong)).expand({kBatch, kSeqLen});
  inputs.query_positions = at::full({kBatch, 1}, kSeqLen - 1, cuda_.dtype(at::kLong));
  inputs.key_valid = at::ones({kBatch, kSeqLen}, cuda_.dtype(at::kBool));
  inputs.key_valid[1].slice(0, 0, 5).fill_(false);
  const AttentionMask mask = BuildAttentionMask(inputs);
  const at::Tensor out =
      Attention(q.to(at::kBFloat16), k.to(at::kBFloat16), v.to(at::kBFloat16), mask);
  const at::Tensor reference = at::scaled_dot_product_attention(
      q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), mask.allowed, 0.0, false);
  ASSERT_EQ(out.sizes(), reference.sizes());
  EXPECT_LT(RelativeError(out, reference), 2e-2);  // bf16 against fp32; a wrong head is O(1)
}

}  // namespace
}  // namespace titan
