#ifndef TITAN_LIB_INTEROP_LOAD_WEIGHTS_H_
#define TITAN_LIB_INTEROP_LOAD_WEIGHTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "lib/model/module.h"
#include "models/llama3/model_args.h"

namespace titan {

// Copies a Llama 3 checkpoint's weights (titan step dir or folder, or Hugging Face; `in_hf` forces
// HF) into `params` ([checkpoint] initial_load_path). The checkpoint's shape must equal `args`;
// every parameter must be present. HF q/k are permuted back to titan's interleaved RoPE layout.
absl::Status LoadLlama3Weights(const std::string& path, bool in_hf, const Llama3Args& args,
                               const std::vector<ParamRef>& params);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_LOAD_WEIGHTS_H_
