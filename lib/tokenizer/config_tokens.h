#ifndef TITAN_LIB_TOKENIZER_CONFIG_TOKENS_H_
#define TITAN_LIB_TOKENIZER_CONFIG_TOKENS_H_

// What tokenizer_config.json says about tokens, applied as transformers' AutoTokenizer applies it:
// its added_tokens_decoder, the tokens it names (bos_token, pad_token, image_token, extra special
// tokens) and its BOS and EOS.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/tokenizer/added_tokens.h"
#include "lib/tokenizer/bpe_tokenizer.h"
#include "nlohmann/json.hpp"

namespace titan {

// tokenizer_config.json as read, its keys in the file's order: transformers gives the tokens it
// names that neither file holds new ids in that order.
using ConfigJson = nlohmann::ordered_json;

// Adds tokenizer_config.json's added_tokens_decoder entries that tokenizer.json lacks, in the
// order of their ids (transformers' order; a config whose ids run past tokenizer.json's
// vocabulary gets them packed after it; torchtitan's loader too); an entry for a token
// tokenizer.json already adds changes its lstrip/rstrip/normalized/special as in ListAgain.
absl::Status ParseConfigAddedTokens(const ConfigJson& config, const JsonErrors& errors,
                                    AddedTokenIds& ids, BpeModel* model);

// The BOS or EOS: its id (none: the tokenizer has none), its text and why it was chosen.
struct SpecialChoice {
  std::optional<int32_t> id;
  std::string token;
  std::string reason;
};

// tokenizer_config.json's `key` (bos_token, eos_token) decides, as in transformers and
// torchtitan: a token (a string or {"content": ...}) that must exist, or null or "" for none.
// Without a config or the key, the first of `conventional` that exists, else none.
absl::StatusOr<SpecialChoice> ChooseSpecialToken(
    const ConfigJson& config, const JsonErrors& config_errors, const char* key,
    const std::vector<std::string>& conventional, const BpeModel& model,
    const absl::flat_hash_map<std::string, int32_t>& vocab, const std::string& json_path);

// Applies tokenizer_config.json's named and extra tokens as AutoTokenizer does. It adds again the
// added tokens of tokenizer_config.json's added_tokens_decoder (without that key, tokenizer.json's
// added_tokens), a named one as special; a named or extra token that is not an added token becomes
// one with its model.vocab id, matched whole before pre-tokenization, special unless it is an extra
// token written as an AddedToken object that is not; an empty one ("") is none, as in
// transformers. For a token found nowhere transformers would add it with a new id; titan warns
// and goes on (a pad or image token is often never in the text it trains on), while
// ChooseSpecialToken has refused a BOS or EOS found nowhere.
absl::Status AddConfigTokens(const Json& root, const ConfigJson& config,
                             const JsonErrors& config_errors,
                             const absl::flat_hash_map<std::string, int32_t>& vocab,
                             const std::string& json_path, AddedTokenIds& ids, BpeModel* model);

// For the log: "<token> = <id> (<reason>)", or "none (<reason>)".
std::string Describe(const SpecialChoice& choice);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_CONFIG_TOKENS_H_
