#ifndef TITAN_LIB_MODEL_BATCH_INVARIANT_H_
#define TITAN_LIB_MODEL_BATCH_INVARIANT_H_

#include <ATen/ATen.h>

namespace titan {

// torchtitan's `[debug] batch_invariant`: the decoder's matmuls and attention give every token
// the same bits whatever else is in the batch and wherever the token sits in the sequence, so
// decoding one token with a KV cache reproduces the full forward exactly (RL: the generator's
// log-probabilities equal the trainer's). CPU kernels pick their blocking from the shapes they
// get; these ops only ever call them on fixed shapes and reduce in a fixed order. Process-wide.
void SetBatchInvariant(bool enabled);
bool BatchInvariant();

// Rows per matmul call: inputs are cut into blocks of this many rows (the last one padded).
inline constexpr int64_t kInvariantRowBlock = 16;
// Keys per attention block: scores, softmax sums and outputs are accumulated block by block in
// key order, so blocks of masked keys add exact zeros.
inline constexpr int64_t kInvariantKeyBlock = 32;

// x @ weightᵀ (x [..., in], weight [out, in]) computed as fixed-shape row blocks.
at::Tensor BatchInvariantLinear(const at::Tensor& x, const at::Tensor& weight);

// The score a masked key gets: the lowest finite value of fp32 or fp64, and fp16's (-65504, finite
// in bf16 too) for 16-bit dtypes; not -inf, so a row that sees no key stays finite, not NaN.
double MaskedScore(at::ScalarType dtype);

// Attention (lib/model/attention.h) with fixed-shape blocks: query rows in blocks of kInvariantRowBlock,
// keys in blocks of kInvariantKeyBlock, softmax max/sum and output accumulated over key blocks in
// order. The math path (no fused kernel): slower, differentiable through ATen's autograd.
// `allowed`: bool [B, 1, Sq, Sk], or undefined for plain causal attention (query i sees keys up
// to i + Sk - Sq).
at::Tensor BatchInvariantAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const at::Tensor& allowed);

}  // namespace titan

#endif  // TITAN_LIB_MODEL_BATCH_INVARIANT_H_
