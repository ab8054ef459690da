#ifndef TITAN_LIB_TOKENIZER_ADDED_TOKENS_H_
#define TITAN_LIB_TOKENIZER_ADDED_TOKENS_H_

// What reading tokenizer.json and tokenizer_config.json share: errors that name the file and the
// key, and added tokens with the ids HF gives them.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/tokenizer/bpe_tokenizer.h"
#include "nlohmann/json.hpp"

namespace titan {

using Json = nlohmann::json;

// Builds errors that name the file and the key.
class JsonErrors {
 public:
  explicit JsonErrors(std::string path) : path_(std::move(path)) {}
  absl::Status Error(const std::string& key, const std::string& what) const;
  absl::Status Expected(const std::string& key, const std::string& expected, const Json& got) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A boolean field that may be absent (its default) or null.
absl::StatusOr<bool> OptionalBool(const Json& object, const char* field, bool fallback,
                                  const JsonErrors& errors, const std::string& key);

// A boolean field that must be there, as tokenizers requires it (serde without a default).
absl::StatusOr<bool> RequiredBool(const Json& object, const char* field, const JsonErrors& errors,
                                  const std::string& key);

// Whether an added token's boolean fields may be left out.
enum class AddedTokenFields {
  kRequired,   // tokenizer.json: tokenizers refuses an entry without one.
  kDefaulted,  // tokenizer_config.json: transformers' AddedToken has defaults.
};

// An added token's object (`content`, `single_word`, `lstrip`, `rstrip`, `normalized`, `special`)
// at `key`, with `id` as written.
absl::StatusOr<BpeModel::AddedToken> ParseAddedToken(const Json& spec, int64_t id,
                                                     AddedTokenFields fields,
                                                     const JsonErrors& errors,
                                                     const std::string& key);

// The ids HF's tokenizers gives added tokens, whatever id a file wrote for them (it only warns):
// one in model.vocab keeps its vocab id, any other takes the next free id after model.vocab's
// entries and the added tokens so far. transformers adds tokenizer_config.json's the same way.
class AddedTokenIds {
 public:
  explicit AddedTokenIds(const absl::flat_hash_map<std::string, int32_t>& vocab)
      : vocab_(vocab), next_id_(static_cast<int64_t>(vocab.size())) {}

  // Adds `token` to `model` with its id; a token listed again (twice in tokenizer.json, or in
  // tokenizer_config.json too) keeps its id and takes the later listing's matching settings, as
  // tokenizers' add_tokens does (transformers adds the config's entries with it); a token once
  // special stays in its special set.
  absl::Status Add(BpeModel::AddedToken token, const JsonErrors& errors, const std::string& key,
                   BpeModel* model);

  // The id the next token outside model.vocab gets.
  int64_t next_id() const { return next_id_; }

  // Logs how many tokens took other ids than written beyond the few logged one by one.
  void LogRenumberedRest() const;

 private:
  // Gives a token not listed before its id.
  absl::Status Assign(BpeModel::AddedToken& token, const JsonErrors& errors,
                      const std::string& key);

  const absl::flat_hash_map<std::string, int32_t>& vocab_;
  // Each added token's index in the model's added_tokens, by content: a token listed again is
  // found at once (a file with tens of thousands of added tokens, listed in both files).
  absl::flat_hash_map<std::string, size_t> position_;
  int64_t next_id_;
  // Tokens whose id differs from the written one: a file renumbered wholesale logs a few lines.
  int64_t renumbered_ = 0;
};

// The id of `name` as an added token or in the vocab, as HF's token_to_id.
std::optional<int32_t> TokenId(const std::string& name, const BpeModel& model,
                               const absl::flat_hash_map<std::string, int32_t>& vocab);

}  // namespace titan

#endif  // TITAN_LIB_TOKENIZER_ADDED_TOKENS_H_
