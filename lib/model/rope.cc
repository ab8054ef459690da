#include "lib/model/rope.h"

#include <algorithm>
#include <cmath>

#include "lib/kernels/rope.h"

namespace titan {
namespace {

const auto kFloat64 = at::TensorOptions().dtype(at::kDouble);

// Llama 3.1: low frequencies divided by the factor, high ones kept, a smooth blend between.
at::Tensor Llama3Scaled(const RopeConfig& c, const at::Tensor& freqs) {
  const double old_len = static_cast<double>(c.original_max_position_embeddings);
  const double low_wavelen = old_len / c.low_freq_factor;
  const double high_wavelen = old_len / c.high_freq_factor;
  at::Tensor wavelen = 2 * M_PI / freqs;
  at::Tensor smooth =
      (old_len / wavelen - c.low_freq_factor) / (c.high_freq_factor - c.low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * freqs / c.factor + smooth * freqs;
  return at::where(wavelen > low_wavelen, freqs / c.factor,
                   at::where(wavelen < high_wavelen, freqs, smoothed));
}

// YaRN's NTK-by-parts blend (arXiv 2309.00071) with Hugging Face's parameterisation.
RopeFrequencies Yarn(const RopeConfig& c, const at::Tensor& extrapolation, int64_t head_dim) {
  const double dim = static_cast<double>(head_dim);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(c.original_max_position_embeddings / (rotations * 2 * M_PI)) /
           (2 * std::log(c.theta));
  };
  double low = correction_dim(c.beta_fast);
  double high = correction_dim(c.beta_slow);
  if (c.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // a one-point ramp would divide by zero
  at::Tensor ramp = ((at::arange(head_dim / 2, kFloat64) - low) / (high - low)).clamp(0, 1);
  at::Tensor extrapolation_weight = 1 - ramp;
  RopeFrequencies out;
  out.inv_freq = extrapolation / c.factor * (1 - extrapolation_weight) +
                 extrapolation * extrapolation_weight;
  out.attention_factor = YarnAttentionFactor(c);
  return out;
}

}  // namespace

RopeFrequencies ComputeRopeFrequencies(const RopeConfig& config, int64_t head_dim) {
  at::Tensor freqs = 1.0 / at::pow(config.theta, at::arange(0, head_dim, 2, kFloat64) / head_dim);
  switch (config.scaling) {
    case RopeScalingType::kLlama3:
      if (config.factor > 0) return {Llama3Scaled(config, freqs), 1.0};
      break;
    case RopeScalingType::kYarn:
      // Whatever the factor, as transformers: 1 keeps the frequencies, < 1 still blends them.
      return Yarn(config, freqs, head_dim);
    case RopeScalingType::kNone:
      break;
  }
  return {freqs, 1.0};
}

RopeTables ComputeRopeTables(const RopeConfig& config, int64_t head_dim, int64_t max_positions,
                             const at::TensorOptions& options) {
  RopeTables tables;
  tables.layout = config.layout;
  tables.enabled = config.enabled;
  if (!config.enabled) return tables;
  const RopeFrequencies freqs = ComputeRopeFrequencies(config, head_dim);
  at::Tensor angles = at::outer(at::arange(max_positions, kFloat64), freqs.inv_freq);
  const auto fp32 = options.dtype(at::kFloat);
  tables.cos = (angles.cos() * freqs.attention_factor).to(fp32);
  tables.sin = (angles.sin() * freqs.attention_factor).to(fp32);
  return tables;
}

RopeRotation RotationForPositions(const RopeTables& tables, const at::Tensor& positions,
                                  int64_t seq_len) {
  RopeRotation rotation;
  rotation.layout = tables.layout;
  rotation.enabled = tables.enabled;
  if (!tables.enabled) return rotation;
  if (!positions.defined()) {
    rotation.cos = tables.cos.slice(0, 0, seq_len).unsqueeze(0).unsqueeze(2);
    rotation.sin = tables.sin.slice(0, 0, seq_len).unsqueeze(0).unsqueeze(2);
  } else {
    rotation.cos = at::embedding(tables.cos, positions).unsqueeze(2);
    rotation.sin = at::embedding(tables.sin, positions).unsqueeze(2);
  }
  return rotation;
}

at::Tensor ApplyRope(const at::Tensor& x, const RopeRotation& rotation) {
  if (!rotation.enabled) return x;
  // One pass instead of ~9 elementwise kernels and their fp32 temporaries.
  if (x.is_cuda() && FusedRopeSupports(x, rotation.cos, rotation.sin).ok()) {
    return FusedRope(x, rotation.cos, rotation.sin,
                     rotation.layout == RopeLayout::kInterleaved ? RopePairing::kInterleaved
                                                                 : RopePairing::kHalves);
  }
  return ApplyRopeUnfused(x, rotation);
}

at::Tensor ApplyRopeUnfused(const at::Tensor& x, const RopeRotation& rotation) {
  if (!rotation.enabled) return x;
  at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor& cos = rotation.cos;
  const at::Tensor& sin = rotation.sin;
  if (rotation.layout == RopeLayout::kInterleaved) {
    at::Tensor pairs = x32.unflatten(-1, {-1, 2});  // [B, S, H, D/2, 2]
    at::Tensor even = pairs.select(-1, 0);
    at::Tensor odd = pairs.select(-1, 1);
    return at::stack({even * cos - odd * sin, even * sin + odd * cos}, -1)
        .flatten(-2)
        .to(x.scalar_type());
  }
  const int64_t half = x.size(-1) / 2;
  at::Tensor first = x32.slice(-1, 0, half);
  at::Tensor second = x32.slice(-1, half);
  return at::cat({first * cos - second * sin, second * cos + first * sin}, -1)
      .to(x.scalar_type());
}

}  // namespace titan
