#include "lib/model/transformer_ops.h"

#include <cmath>

namespace titan {

RopeTables ComputeRopeTables(int64_t head_dim, int64_t max_seq_len, double theta,
                             const RopeScaling& scaling, const at::TensorOptions& options) {
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  at::Tensor freqs =
      1.0 / at::pow(theta, at::arange(0, head_dim, 2, f64).slice(0, 0, head_dim / 2) / head_dim);
  if (scaling.factor > 0) {
    const double old_len = static_cast<double>(scaling.original_max_position_embeddings);
    const double low_wavelen = old_len / scaling.low_freq_factor;
    const double high_wavelen = old_len / scaling.high_freq_factor;
    at::Tensor wavelen = 2 * M_PI / freqs;
    at::Tensor smooth = (old_len / wavelen - scaling.low_freq_factor) /
                        (scaling.high_freq_factor - scaling.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * freqs / scaling.factor + smooth * freqs;
    freqs = at::where(wavelen > low_wavelen, freqs / scaling.factor,
                      at::where(wavelen < high_wavelen, freqs, smoothed));
  }
  at::Tensor angles = at::outer(at::arange(max_seq_len, f64), freqs);
  return {angles.cos().to(options.dtype(at::kFloat)), angles.sin().to(options.dtype(at::kFloat))};
}

at::Tensor ApplyRotaryEmbedding(const at::Tensor& x, const RopeTables& rope) {
  const int64_t seq_len = x.size(1);
  at::Tensor pairs = x.to(at::kFloat).unflatten(-1, {-1, 2});  // [B, S, H, D/2, 2]
  at::Tensor even = pairs.select(-1, 0);
  at::Tensor odd = pairs.select(-1, 1);
  at::Tensor cos = rope.cos.slice(0, 0, seq_len).unsqueeze(0).unsqueeze(2);  // [1, S, 1, D/2]
  at::Tensor sin = rope.sin.slice(0, 0, seq_len).unsqueeze(0).unsqueeze(2);
  at::Tensor rotated = at::stack({even * cos - odd * sin, even * sin + odd * cos}, -1);
  return rotated.flatten(-2).to(x.scalar_type());
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return normed.to(x.scalar_type()) * weight;
}

at::Tensor SwiGlu(const at::Tensor& x, const at::Tensor& w1, const at::Tensor& w2,
                  const at::Tensor& w3) {
  return at::linear(at::silu(at::linear(x, w1)) * at::linear(x, w3), w2);
}

int64_t FeedForwardHiddenDim(int64_t dim, int64_t multiple_of, double ffn_dim_multiplier) {
  int64_t hidden = 2 * (4 * dim) / 3;
  if (ffn_dim_multiplier > 0) hidden = static_cast<int64_t>(ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

}  // namespace titan
