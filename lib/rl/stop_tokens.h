#ifndef TITAN_LIB_RL_STOP_TOKENS_H_
#define TITAN_LIB_RL_STOP_TOKENS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/registry/model_spec.h"

namespace titan {

// The ids a response ends at, and where they were read (for the log).
struct StopTokens {
  std::vector<int64_t> ids;  // empty: responses run to max_new_tokens
  std::string source;
};

// What a generation config that names no eos_token_id (no key, null or []) stops at.
enum class NoGenerationEos {
  kNoStop,    // none, as transformers' generate: responses run to max_new_tokens (--generate)
  kModelEos,  // the model's eos_token_id: a training run's responses need an end
};

// As transformers' generate: the eos_token_id (an id or a list of ids) of the model's generation
// config (its Hugging Face folder's generation_config.json, or the one a converted checkpoint
// carries), as the file has it; one naming none stops as `no_eos` says. Without a generation
// config, the model's eos_token_id (config.json's, else the tokenizer's EOS, as ResolveModel fills
// it), as transformers builds one from config.json. An id that is not an integer below the model's
// vocab size (its embedding rows) is refused with one line naming where it was read.
absl::StatusOr<StopTokens> StopTokensOf(const ModelInfo& model, NoGenerationEos no_eos);

}  // namespace titan

#endif  // TITAN_LIB_RL_STOP_TOKENS_H_
