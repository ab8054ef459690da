#include "lib/rl/stop_tokens.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using nlohmann::json;

// `eos` as token ids (`where` names it in errors): an id or a list of ids; null gives none.
absl::StatusOr<std::vector<int64_t>> EosIds(const json& eos, const std::string& where,
                                            int64_t vocab_size) {
  const json ids = eos.is_array() ? eos : eos.is_null() ? json::array() : json::array({eos});
  std::vector<int64_t> out;
  for (const json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": expected token ids below the model's vocab size ", vocab_size,
                       ", got ", eos.dump()));
    }
    out.push_back(id.get<int64_t>());
  }
  return out;
}

}  // namespace

absl::StatusOr<StopTokens> StopTokensOf(const ModelInfo& model, NoGenerationEos no_eos) {
  const int64_t vocab_size = model.args.vocab_size;
  std::string where = "the model's eos_token_id";
  if (model.hf_generation_config.is_object()) {
    const std::string generation_where = "the model's generation_config.json eos_token_id";
    absl::StatusOr<std::vector<int64_t>> ids = EosIds(
        model.hf_generation_config.value("eos_token_id", json()), generation_where, vocab_size);
    if (!ids.ok()) return ids.status();
    if (!ids->empty()) return StopTokens{*std::move(ids), generation_where};
    // transformers takes an existing generation config as it is: no stop, not config.json's.
    if (no_eos == NoGenerationEos::kNoStop) {
      return StopTokens{{},
                        "the model's generation_config.json names no eos_token_id: responses "
                        "run to max_new_tokens, as transformers' generate"};
    }
    where =
        "the model's eos_token_id; its generation_config.json names none, and a training "
        "run's responses need an end";
  }
  absl::StatusOr<std::vector<int64_t>> ids = EosIds(model.eos_token_id, where, vocab_size);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) {
    return absl::InvalidArgumentError(
        "the model names no EOS token (config.json, generation_config.json and the tokenizer "
        "give none): a response could not end");
  }
  return StopTokens{*std::move(ids), where};
}

}  // namespace titan
