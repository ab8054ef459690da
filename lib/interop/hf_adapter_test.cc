#include "lib/interop/hf_adapter.h"

#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/model/rope.h"
#include "lib/model/transformer_ops.h"
#include "lib/registry/model_spec.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

// A small Llama-like shape: interleaved RoPE (Meta's layout), GQA.
TransformerArgs SmallArgs() {
  TransformerArgs args = (*FindModel("llama3"))->defaults;
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 96;
  args.ffn_hidden_dim = 160;
  args.max_seq_len = 64;
  return args;
}

TEST(HfAdapterTest, NamesMapBothWaysForEveryParameterOfEveryFamily) {
  for (const char* family : {"llama3", "qwen3"}) {
    const ModelSpec& spec = **FindModel(family);
    TransformerArgs args = spec.Flavor("debugmodel").value();
    args.vocab_size = 32;
    args.n_layers = 2;
    std::set<std::string> hf_names;
    for (const auto& [name, shape] : ParameterShapes(spec, args)) {
      absl::StatusOr<std::string> hf = TitanToHfName(name);
      ASSERT_TRUE(hf.ok()) << hf.status();
      hf_names.insert(*hf);
      EXPECT_EQ(*HfToTitanName(*hf), name);
    }
    // llama3 debugmodel: 9 per layer + embedding, norm, output; qwen3 adds q/k norms, ties.
    EXPECT_EQ(hf_names.size(), family == std::string("llama3") ? 2u * 9 + 3 : 2u * 11 + 2);
  }
  EXPECT_EQ(*TitanToHfName("layers.1.feed_forward.w1.weight"),
            "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(*TitanToHfName("layers.0.feed_forward.w3.weight"), "model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(*TitanToHfName("layers.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(*TitanToHfName("layers.3.attention.k_norm.weight"),
            "model.layers.3.self_attn.k_norm.weight");
  EXPECT_EQ(*TitanToHfName("output.weight"), "lm_head.weight");
  EXPECT_THAT(HfToTitanName("model.layers.x.mlp.gate_proj.weight").status().message(),
              HasSubstr("not a Hugging Face decoder parameter"));
  EXPECT_FALSE(TitanToHfName("layers.0.attention.wq.bias").ok());
}

TEST(HfAdapterTest, PermutationIsInvertibleAndMovesPairsToHalves) {
  const at::Tensor w = at::arange(2 * 8 * 3, at::kFloat).view({16, 3});  // 2 heads of dim 8
  const at::Tensor hf = InterleavedToRotateHalf(w, 2);
  EXPECT_TRUE(RotateHalfToInterleaved(hf, 2).equal(w));
  // Head 0's interleaved rows (0,1),(2,3),(4,5),(6,7) become halves 0,2,4,6 | 1,3,5,7.
  const std::vector<int64_t> order = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
  for (int64_t i = 0; i < 16; ++i) EXPECT_TRUE(hf[i].equal(w[order[i]])) << i;
}

// Rotate-half RoPE as transformers applies it: x * cos + rotate_half(x) * sin.
at::Tensor RotateHalfRope(const at::Tensor& x, const RopeTables& rope) {
  const int64_t seq = x.size(1), half = x.size(-1) / 2;
  at::Tensor cos = at::cat({rope.cos, rope.cos}, -1).slice(0, 0, seq).unsqueeze(0).unsqueeze(2);
  at::Tensor sin = at::cat({rope.sin, rope.sin}, -1).slice(0, 0, seq).unsqueeze(0).unsqueeze(2);
  at::Tensor rotated = at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

// [1, S, H, D] with each head's last dim permuted as InterleavedToRotateHalf permutes rows.
at::Tensor PermuteHeads(const at::Tensor& x) {
  const int64_t seq = x.size(1), heads = x.size(2), head_dim = x.size(3);
  return InterleavedToRotateHalf(x.reshape({seq, heads * head_dim}).t(), heads)
      .t()
      .reshape({1, seq, heads, head_dim});
}

// An interleaved family's q projection, qk-norm and RoPE, against Hugging Face's computation on
// the converted tensors: the same result with each head's dims permuted. RoPE runs in fp32 in
// titan (1e-5); the permutation itself is exact.
TEST(HfAdapterTest, ConvertedQkUnderRotateHalfRopeMatchesInterleavedRope) {
  TransformerArgs args = SmallArgs();
  args.qk_norm = true;
  at::manual_seed(0);
  const int64_t heads = args.n_heads, head_dim = args.head_size(), seq = 5;
  const at::Tensor wq = at::randn({heads * head_dim, args.dim}, at::kDouble);
  const at::Tensor q_norm = 1 + 0.2 * at::randn({head_dim}, at::kDouble);
  const at::Tensor x = at::randn({1, seq, args.dim}, at::kDouble);
  RopeTables rope = ComputeRopeTables(args.rope, head_dim, args.max_seq_len, at::TensorOptions());
  const RopeRotation rotation = RotationForPositions(rope, at::Tensor(), seq);
  rope.cos = rope.cos.to(at::kDouble);
  rope.sin = rope.sin.to(at::kDouble);

  const auto project = [&](const at::Tensor& w, const at::Tensor& norm) {
    return RmsNorm(at::linear(x, w).view({1, seq, heads, head_dim}), norm, args.norm_eps);
  };
  const at::Tensor titan = ApplyRope(project(wq, q_norm), rotation);  // interleaved layout
  const at::Tensor hf_wq = TitanTensorToHf("layers.0.attention.wq.weight", wq, args);
  const at::Tensor hf_norm = TitanTensorToHf("layers.0.attention.q_norm.weight", q_norm, args);
  const at::Tensor hf = RotateHalfRope(project(hf_wq, hf_norm), rope);
  EXPECT_TRUE(at::allclose(hf, PermuteHeads(titan), 1e-5, 1e-5));
  EXPECT_FALSE(hf_norm.equal(q_norm));
  EXPECT_TRUE(HfTensorToTitan("layers.0.attention.q_norm.weight", hf_norm, args).equal(q_norm));
  EXPECT_TRUE(HfTensorToTitan("layers.0.attention.wq.weight", hf_wq, args).equal(wq));
  const at::Tensor wk = at::randn({args.kv_heads() * head_dim, args.dim});
  EXPECT_TRUE(HfTensorToTitan("layers.1.attention.wk.weight",
                              TitanTensorToHf("layers.1.attention.wk.weight", wk, args), args)
                  .equal(wk));
  EXPECT_TRUE(TitanTensorToHf("layers.0.attention.wv.weight", wk, args).equal(wk));
}

TEST(HfAdapterTest, RotateHalfFamiliesKeepTheirTensors) {
  TransformerArgs args = (*FindModel("qwen3"))->defaults;
  args.dim = 64;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  const at::Tensor wq = at::randn({args.n_heads * args.head_size(), args.dim});
  const at::Tensor norm = at::randn({args.head_size()});
  EXPECT_TRUE(TitanTensorToHf("layers.0.attention.wq.weight", wq, args).equal(wq));
  EXPECT_TRUE(HfTensorToTitan("layers.0.attention.wq.weight", wq, args).equal(wq));
  EXPECT_TRUE(TitanTensorToHf("layers.0.attention.k_norm.weight", norm, args).equal(norm));
}

}  // namespace
}  // namespace titan
