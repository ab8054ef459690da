#include "lib/rl/stop_tokens.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/interop/checkpoint_reader.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using nlohmann::json;

// The folders that may hold the model's generation_config.json, in the order they are looked in.
std::vector<std::string> HfFolders(const JobConfig& config) {
  std::vector<std::string> folders;
  if (!config.model().hf_assets_path().empty()) folders.push_back(config.model().hf_assets_path());
  const auto& ckpt = config.checkpoint();
  if (ckpt.initial_load_in_hf() && !ckpt.initial_load_path().empty()) {
    folders.push_back(ckpt.initial_load_path());
  }
  return folders;
}

// A generation config's eos_token_id (`where` names it in errors): an id or a list of ids; null
// or absent gives none.
absl::StatusOr<std::vector<int64_t>> EosIds(const json& config, const std::string& where,
                                            int64_t vocab_size) {
  const json eos = config.value("eos_token_id", json());
  const json ids = eos.is_array() ? eos : eos.is_null() ? json::array() : json::array({eos});
  std::vector<int64_t> out;
  for (const json& id : ids) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": eos_token_id: expected token ids below the model's vocab size ",
                       vocab_size, ", got ", eos.dump()));
    }
    out.push_back(id.get<int64_t>());
  }
  return out;
}

}  // namespace

absl::StatusOr<StopTokens> StopTokensFromConfig(const JobConfig& config, const Tokenizer& tokenizer,
                                                const ModelInfo& model) {
  const int64_t vocab_size = model.args.vocab_size;
  for (const std::string& folder : HfFolders(config)) {
    // Absent or malformed (warned): transformers too generates without it then.
    const json parsed = ReadHfGenerationConfig(folder);
    if (!parsed.is_object()) continue;
    const std::string path = (std::filesystem::path(folder) / "generation_config.json").string();
    absl::StatusOr<std::vector<int64_t>> ids = EosIds(parsed, path, vocab_size);
    if (!ids.ok()) return ids.status();
    if (!ids->empty()) return StopTokens{*std::move(ids), absl::StrCat(path, " eos_token_id")};
  }
  // A titan checkpoint converted from Hugging Face files carries their generation config.
  if (model.hf_generation_config.is_object()) {
    const std::string where = "the checkpoint's generation_config.json";
    absl::StatusOr<std::vector<int64_t>> ids =
        EosIds(model.hf_generation_config, where, vocab_size);
    if (!ids.ok()) return ids.status();
    if (!ids->empty()) return StopTokens{*std::move(ids), absl::StrCat(where, " eos_token_id")};
  }
  return StopTokens{{tokenizer.eos_id()}, "the tokenizer's EOS"};
}

}  // namespace titan
