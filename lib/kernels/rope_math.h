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

  // One row per (b, s, h): head_dim / 2 pairs each.
  TITAN_HOST_DEVICE int64_t rows() const { return batch * seq * heads; }
};

// Where row r (0 .. rows()) starts in x and in cos/sin. The kernels loop over a row's pairs
// inside a loop over rows, so these divisions run once a row rather than once an element.
struct RopeRowStart {
  int64_t x;
  int64_t angle;
};

TITAN_HOST_DEVICE RopeRowStart RopeRowStartOf(int64_t row, const RopeDims& d) {
  const int64_t token = row / d.heads;  // (b, s)
  return {row * d.head_dim, (d.broadcast_batch ? token % d.seq : token) * (d.head_dim / 2)};
}

// The two elements pair j of a row rotates, from the row's start; its angle is the row's j-th.
struct RopePairInRow {
  int64_t first;
  int64_t second;
};

TITAN_HOST_DEVICE RopePairInRow RopePairOf(int64_t j, const RopeDims& d) {
  if (d.pairing == RopePairing::kInterleaved) return {2 * j, 2 * j + 1};
  return {j, j + d.head_dim / 2};
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
