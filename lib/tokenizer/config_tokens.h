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
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/tokenizer/added_tokens.h"
#include "lib/tokenizer/bpe_tokenizer.h"
#include "nlohmann/json.hpp"

namespace titan {

// tokenizer_config.json as read, its keys in the file's order: transformers gives the tokens it
// names that neither file holds new ids in that order. Its added_tokens_decoder is read apart
// (TokenSettings): an ordered object inserts each key in linear time.
using ConfigJson = nlohmann::ordered_json;

// Adds tokenizer_config.json's added_tokens_decoder entries that tokenizer.json lacks, in the
// order of their ids (transformers' order; a config whose ids run past tokenizer.json's
// vocabulary gets them packed after it; torchtitan's loader too); an entry for a token
// tokenizer.json already adds changes its lstrip/rstrip/normalized/special as AddedTokenIds::Add
// says.
absl::Status ParseConfigAddedTokens(const Json& decoder, const JsonErrors& errors,
                                    AddedTokenIds& ids, BpeModel* model);

// The token settings AutoTokenizer reads: tokenizer_config.json's keys, with those of
// special_tokens_map.json applied where the config has no added_tokens_decoder, and which file
// each key came from.
struct TokenSettings {
  ConfigJson json;  // Null: neither file. Its added_tokens_decoder is left empty:
  Json added_tokens_decoder = Json::object();  // the config's, as written.
  bool has_config = false;
  bool has_map = false;  // special_tokens_map.json was read.
  JsonErrors config_errors{""};
  JsonErrors map_errors{""};
  absl::flat_hash_set<std::string> from_map;  // Top-level keys special_tokens_map.json set.

  const JsonErrors& ErrorsFor(const std::string& key) const {
    return from_map.contains(key) ? map_errors : config_errors;
  }
  // The file `key` came from, for the log.
  const char* SourceOf(const std::string& key) const {
    return from_map.contains(key) ? "special_tokens_map.json" : "tokenizer_config.json";
  }
};

// Applies special_tokens_map.json (`map`, its errors in settings->map_errors) as
// transformers 5.24's legacy loading does: its value for a named attribute (bos_token ...
// mask_token) overrides the config's; another *_token key names a token unless the config names
// that key itself; an extra_special_tokens list is appended to the config's extra tokens;
// additional_special_tokens counts only where the config lists no extra tokens. Other keys do not
// concern tokens.
absl::Status ApplySpecialTokensMap(const ConfigJson& map, TokenSettings* settings);

// The BOS or EOS: its id (none: the tokenizer has none), its text and why it was chosen.
struct SpecialChoice {
  std::optional<int32_t> id;
  std::string token;
  std::string reason;
};

// The settings' `key` (bos_token, eos_token) decides, as in transformers and torchtitan: a token
// (a string or {"content": ...}) that must exist, or null or "" for none. Without the key, the
// first of `conventional` that exists, else none.
absl::StatusOr<SpecialChoice> ChooseSpecialToken(
    const TokenSettings& settings, const char* key, const std::vector<std::string>& conventional,
    const BpeModel& model, const absl::flat_hash_map<std::string, int32_t>& vocab,
    const std::string& json_path);

// Applies the settings' named and extra tokens as AutoTokenizer does. It adds again the added
// tokens of tokenizer_config.json's added_tokens_decoder (without that key, tokenizer.json's
// added_tokens), a named one as special; a named or extra token that is not an added token becomes
// one with its model.vocab id, matched whole before pre-tokenization, special unless it is an extra
// token written as an AddedToken object that is not. An empty token ("") is none, as in
// transformers. For a token found nowhere transformers would add it with a new id; titan warns and
// goes on (a pad or image token is often never in the text it trains on), while
// ChooseSpecialToken has refused a BOS or EOS found nowhere. Under tokenizer_class Qwen2Tokenizer
// every named and extra added token ends special, without lstrip/rstrip, not normalized.
absl::Status AddConfigTokens(const Json& root, const TokenSettings& settings,
                             const absl::flat_hash_map<std::string, int32_t>& vocab,
                             const std::string& json_path, AddedTokenIds& ids, BpeModel* model);

// For the log: "<token> = <id> (<reason>)", or "none (<reason>)".
std::string Describe(const SpecialChoice& choice);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_CONFIG_TOKENS_H_
