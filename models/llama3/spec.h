#ifndef TITAN_MODELS_LLAMA3_SPEC_H_
#define TITAN_MODELS_LLAMA3_SPEC_H_

#include "lib/registry/model_spec.h"

namespace titan {

// Llama 3 / 3.1 / 3.2: debugmodel, 1B, 3B (tied), 8B, 70B, 405B; Meta's interleaved RoPE layout
// (Hugging Face checkpoints are permuted on the way in and out), torchtitan's Llama init.
ModelSpec Llama3Spec();

}  // namespace titan

#endif  // TITAN_MODELS_LLAMA3_SPEC_H_
