#ifndef TITAN_LIB_MODEL_ROPE_H_
#define TITAN_LIB_MODEL_ROPE_H_

#include <ATen/ATen.h>

#include <cstdint>

#include "lib/model/transformer_args.h"

namespace titan {

// The inverse frequencies of `config` for heads of `head_dim` ([head_dim / 2], float64), and the
// factor YaRN applies to cos and sin (1 otherwise).
struct RopeFrequencies {
  at::Tensor inv_freq;
  double attention_factor = 1;
};
RopeFrequencies ComputeRopeFrequencies(const RopeConfig& config, int64_t head_dim);

// cos and sin of every position up to `max_positions`, [max_positions, head_dim / 2] in fp32.
struct RopeTables {
  at::Tensor cos;
  at::Tensor sin;
  RopeLayout layout = RopeLayout::kInterleaved;
  bool enabled = true;
};
RopeTables ComputeRopeTables(const RopeConfig& config, int64_t head_dim, int64_t max_positions,
                             const at::TensorOptions& options);

// The rotation of one batch's tokens: cos and sin shaped [B or 1, S, 1, head_dim / 2].
struct RopeRotation {
  at::Tensor cos;
  at::Tensor sin;
  RopeLayout layout = RopeLayout::kInterleaved;
  bool enabled = true;
};
// `positions` [B, S] int64 (any order, e.g. context-parallel shards or decoding offsets), or
// undefined for 0 .. seq_len - 1.
RopeRotation RotationForPositions(const RopeTables& tables, const at::Tensor& positions,
                                  int64_t seq_len);

// x: [B, S, H, D], rotated in fp32 and cast back to x's dtype. On an H100/H200 the fused kernel
// (lib/kernels/rope.h) when it takes the tensors, ApplyRopeUnfused elsewhere.
at::Tensor ApplyRope(const at::Tensor& x, const RopeRotation& rotation);

// The LibTorch composition of ApplyRope: its CPU path, and the oracle the fused kernel is tested
// against.
at::Tensor ApplyRopeUnfused(const at::Tensor& x, const RopeRotation& rotation);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_ROPE_H_
