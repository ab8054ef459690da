#ifndef TITAN_LIB_RL_STOP_TOKENS_H_
#define TITAN_LIB_RL_STOP_TOKENS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/config/job_config.pb.h"
#include "lib/registry/model_spec.h"
#include "lib/tokenizer/tokenizer.h"

namespace titan {

// The ids a response ends at, and where they were read (for the log).
struct StopTokens {
  std::vector<int64_t> ids;
  std::string source;
};

// As transformers' generate: the eos_token_id (an id or a list of ids) of generation_config.json
// in the model's Hugging Face folder ([model] hf_assets_path, else [checkpoint] initial_load_path
// when initial_load_in_hf), the first of them that has the file; else the one `model` carries (a
// titan checkpoint converted from Hugging Face files). Without any, or with no ids in it, the
// tokenizer's EOS. An id that is not an integer below the model's vocab size (its embedding rows)
// is refused with one line naming the file.
absl::StatusOr<StopTokens> StopTokensFromConfig(const JobConfig& config, const Tokenizer& tokenizer,
                                                const ModelInfo& model);

}  // namespace titan

#endif  // TITAN_LIB_RL_STOP_TOKENS_H_
