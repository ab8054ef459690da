#ifndef TITAN_LIB_MODEL_TRANSFORMER_OPS_H_
#define TITAN_LIB_MODEL_TRANSFORMER_OPS_H_

#include <ATen/ATen.h>

#include <cstdint>

namespace titan {

// Llama 3.1's RoPE frequency scaling (long-context extension); disabled when factor <= 0.
struct RopeScaling {
  double factor = 0;
  double low_freq_factor = 1;
  double high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
};

// cos and sin tables [max_seq_len, head_dim / 2] in fp32 for interleaved (Meta layout) RoPE.
struct RopeTables {
  at::Tensor cos;
  at::Tensor sin;
};
RopeTables ComputeRopeTables(int64_t head_dim, int64_t max_seq_len, double theta,
                             const RopeScaling& scaling, const at::TensorOptions& options);

// x: [B, S, H, D] with (x[2i], x[2i+1]) rotated by position — Meta's complex-number layout.
at::Tensor ApplyRotaryEmbedding(const at::Tensor& x, const RopeTables& rope);

// x * rsqrt(mean(x^2) + eps) * weight, computed in fp32 and cast back (as Llama's reference).
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// w2(silu(w1 x) * w3 x) with weights in nn.Linear's [out, in] layout.
at::Tensor SwiGlu(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2,
                  const at::Tensor& w3);

// Llama's FFN width: 2/3 of 4·dim, times the multiplier, rounded up to `multiple_of`.
int64_t FeedForwardHiddenDim(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_TRANSFORMER_OPS_H_
