#ifndef TITAN_LIB_KERNELS_ROPE_MATH_H_
#define TITAN_LIB_KERNELS_ROPE_MATH_H_

#include <cstdint>

#include "lib/kernels/host_device.h"

namespace titan {

// Which two elements of a head one angle rotates: (2j, 2j + 1) as Meta's Llama, or (j, j + D/2)
// as Hugging Face's rotate_half.
enum class RopePairing { kInterleaved, kHalves };

// x [batch, seq, heads, head_dim] and cos/sin [batch or 1, seq, 1, head_dim / 2], contiguous.
struct RopeDims {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  bool broadcast_batch = false;  // cos/sin hold one row per position for every batch row
  RopePairing pairing = RopePairing::kInterleaved;

  TITAN_HOST_DEVICE int64_t pairs() const { return batch * seq * heads * (head_dim / 2); }
};

// Where pair p (0 .. pairs()) reads and writes x, and where it reads cos and sin.
struct RopeOffsets {
  int64_t first;
  int64_t second;
  int64_t angle;
};

TITAN_HOST_DEVICE RopeOffsets RopePairOffsets(int64_t p, const RopeDims& d) {
  const int64_t half = d.head_dim / 2;
  const int64_t row = p / half;  // (b, s, h)
  const int64_t j = p - row * half;
  const int64_t token = row / d.heads;  // (b, s)
  const int64_t angle = (d.broadcast_batch ? token % d.seq : token) * half + j;
  const int64_t base = row * d.head_dim;
  if (d.pairing == RopePairing::kInterleaved) return {base + 2 * j, base + 2 * j + 1, angle};
  return {base + j, base + j + half, angle};
}

struct RotatedPair {
  float first;
  float second;
};

// (a, b) rotated by the angle of cos c and sin s; pass -s for the inverse rotation (the backward).
// ApplyRope's products and sums, in its order.
TITAN_HOST_DEVICE RotatedPair RotatePair(float a, float b, float c, float s) {
  return {a * c - b * s, a * s + b * c};
}

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_ROPE_MATH_H_
