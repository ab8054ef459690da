#ifndef TITAN_MODELS_QWEN3_SPEC_H_
#define TITAN_MODELS_QWEN3_SPEC_H_

#include "lib/registry/model_spec.h"

namespace titan {

// Qwen3 dense: debugmodel, 0.6B, 1.7B, 4B (tied), 8B, 14B, 32B; qk-norm, a head size of 128
// independent of dim, Hugging Face's rotate-half RoPE (checkpoints load without permutation),
// torchtitan's Qwen3 init (plain normal, std 0.02).
ModelSpec Qwen3Spec();

}  // namespace titan

#endif  // TITAN_MODELS_QWEN3_SPEC_H_
