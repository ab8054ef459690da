#ifndef TITAN_LIB_INTEROP_HF_CONFIG_H_
#define TITAN_LIB_INTEROP_HF_CONFIG_H_

// Hugging Face config.json and generation_config.json for every registered family: the keys the
// shared decoder's families have in common, plus each family's identity and constants (its
// ModelSpec::hf).

#include <string>

#include "absl/status/statusor.h"
#include "lib/registry/model_spec.h"
#include "nlohmann/json.hpp"

namespace titan {

// config.json for `info` as transformers writes it (legacy rope_theta + rope_scaling, which every
// transformers version reads); `torch_dtype` is "float32", "bfloat16", ...
nlohmann::json HfConfig(const ModelInfo& info, const std::string& torch_dtype);
// generation_config.json: info.hf_generation_config verbatim when the model came with one, else
// the special ids.
nlohmann::json HfGenerationConfig(const ModelInfo& info);

// Reads a config.json: the family is the registered spec whose hf.model_type matches; the common
// keys are read onto its defaults (keys transformers itself defaults, rms_norm_eps and rope_theta,
// take transformers' defaults when absent); RoPE default, llama3 or yarn from rope_scaling or
// transformers 5's rope_parameters. What the decoder cannot represent (biases, activations other
// than silu, sliding windows in use, other RoPE types, partial rotary) is refused with one line
// naming `source` (the path) and the key, as is a null where transformers cannot build and run the
// model with it (rope_theta, hidden_act, ...). The special ids (bos, eos, pad) are kept as written.
absl::StatusOr<ModelInfo> ModelInfoFromHfConfig(const nlohmann::json& config,
                                                const std::string& source);

}  // namespace titan

#endif  // TITAN_LIB_INTEROP_HF_CONFIG_H_
