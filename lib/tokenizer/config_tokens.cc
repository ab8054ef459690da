#include "lib/tokenizer/config_tokens.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/util/short_text.h"

namespace titan {
namespace {

// A token tokenizer_config.json names (bos_token, pad_token, image_token, an extra special token):
// the key naming it and its AddedToken; a plain string stands for {"content": string, "special":
// true}, as transformers makes it.
struct ConfigToken {
  std::string key;
  Json spec;
  const JsonErrors* errors;  // Of the file that named it.
  const std::string& content() const { return spec["content"].get_ref<const std::string&>(); }
};

// `value` of `key` as a token: a string or {"content": ...}; nullopt for null and for an empty
// token, which transformers never adds (its id is None).
absl::StatusOr<std::optional<ConfigToken>> ParseConfigToken(const ConfigJson& value,
                                                            const std::string& key,
                                                            const JsonErrors& errors) {
  if (value.is_null()) return std::nullopt;
  Json spec;
  if (value.is_string()) {
    spec = Json::object({{"content", value.get<std::string>()}, {"special", true}});
  } else if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    spec = Json(value);
  } else {
    return errors.Expected(key, "a token string, {\"content\": ...} or null", Json(value));
  }
  if (spec["content"].get_ref<const std::string&>().empty()) return std::nullopt;
  return ConfigToken{key, std::move(spec), &errors};
}

// The content of a token `value` names ("" for null or none).
std::string TokenContent(const ConfigJson& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  return "";
}

// A BOS or EOS tokenizer_config.json names that neither file holds.
absl::Status NamedTokenMissing(const JsonErrors& config_errors, const std::string& key,
                               const std::string& name, const std::string& json_path) {
  return config_errors.Error(
      key, absl::StrCat(QuotedShort(name), " is neither an added token nor in ", json_path,
                        "'s model.vocab (transformers would add it with a new id; titan does not "
                        "grow the vocabulary for a token name)"));
}

// transformers' named token attributes; other keys ending in _token name tokens too.
constexpr std::array<const char*, 7> kTokenAttributes = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

bool IsTokenAttribute(const std::string& key) {
  return std::find(kTokenAttributes.begin(), kTokenAttributes.end(), key) != kTokenAttributes.end();
}

// transformers reads a plain object under a model-specific *_token key as no token at all.
bool IsModelSpecificToken(const std::string& key, const ConfigJson& value) {
  const bool added_token = value.is_object() && value.value("__type", ConfigJson()) == "AddedToken";
  return !IsTokenAttribute(key) && absl::EndsWith(key, "_token") &&
         (value.is_string() || added_token);
}

// Whether an extra-token list or object holds anything (null: nothing), as Python's truth.
bool NonEmpty(const ConfigJson* value) {
  return value != nullptr && !value->is_null() && !value->empty();
}

const ConfigJson* Find(const ConfigJson& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// special_tokens_map.json's token `value` as transformers reads it: an object is an AddedToken made
// special, whatever the file says.
ConfigJson MapToken(ConfigJson value) {
  if (value.is_object()) {
    value["special"] = true;
    value["__type"] = "AddedToken";
  }
  return value;
}

// special_tokens_map.json's extra_special_tokens (a list appended to the config's extra tokens)
// or additional_special_tokens (used only where the config has neither key, or an
// extra_special_tokens object, which transformers moves aside first).
absl::Status ApplyMapExtras(const std::string& key, const ConfigJson& value,
                            const ConfigJson& original, TokenSettings* settings) {
  const ConfigJson* config_extra = Find(original, "extra_special_tokens");
  const ConfigJson* config_additional = Find(original, "additional_special_tokens");
  if (config_extra != nullptr && config_extra->is_object() && !config_extra->empty()) {
    return settings->map_errors.Error(
        key, "not supported beside tokenizer_config.json's extra_special_tokens object");
  }
  if (!value.is_array())
    return settings->map_errors.Expected(key, "an array of tokens", Json(value));
  ConfigJson& config = settings->json;
  if (key == "additional_special_tokens") {
    if (config_additional != nullptr || (config_extra != nullptr && !config_extra->is_object())) {
      return absl::OkStatus();  // transformers keeps the config's extra tokens.
    }
    config[key] = value;
    settings->from_map.insert(key);
    return absl::OkStatus();
  }
  // The config's extra tokens as transformers has them: additional_special_tokens stands in for
  // an empty extra_special_tokens.
  ConfigJson merged = ConfigJson::array();
  if (NonEmpty(config_extra)) {
    merged = *config_extra;
  } else if (config_additional != nullptr && config_additional->is_array()) {
    merged = *config_additional;
  }
  for (const ConfigJson& token : value) {
    const std::string content = TokenContent(token);
    const bool listed = std::any_of(merged.begin(), merged.end(), [&](const ConfigJson& other) {
      return TokenContent(other) == content;
    });
    if (!listed) merged.push_back(MapToken(token));
  }
  config.erase("additional_special_tokens");
  config[key] = std::move(merged);
  settings->from_map.insert(key);
  return absl::OkStatus();
}

// The tokens tokenizer_config.json names, as transformers 5.24 collects them: `named` (the seven
// attributes; any other *_token key holding a string or an {"__type": "AddedToken"} object; an
// extra_special_tokens object's entries) and `extra` (an extra_special_tokens list, else
// additional_special_tokens').
absl::Status CollectConfigTokens(const TokenSettings& settings, std::vector<ConfigToken>* named,
                                 std::vector<ConfigToken>* extra) {
  const ConfigJson& config = settings.json;
  // `top_key`: the config's key holding `value`, which says the file it came from.
  const auto collect = [&](const ConfigJson& value, const std::string& key,
                           const std::string& top_key,
                           std::vector<ConfigToken>* to) -> absl::Status {
    absl::StatusOr<std::optional<ConfigToken>> token =
        ParseConfigToken(value, key, settings.ErrorsFor(top_key));
    if (!token.ok()) return token.status();
    if (token->has_value()) to->push_back(**std::move(token));
    return absl::OkStatus();
  };
  for (const char* key : kTokenAttributes) {
    if (!config.contains(key)) continue;
    if (absl::Status s = collect(config[key], key, key, named); !s.ok()) return s;
  }
  for (const auto& [key, value] : config.items()) {
    if (!IsModelSpecificToken(key, value)) continue;
    if (absl::Status s = collect(value, key, key, named); !s.ok()) return s;
  }
  // An empty extra_special_tokens gives way to additional_special_tokens, as in transformers.
  const char* extra_key = "extra_special_tokens";
  auto extras = config.find(extra_key);
  if (extras == config.end() || extras->empty()) {
    extra_key = "additional_special_tokens";
    extras = config.find(extra_key);
  }
  if (extras == config.end() || extras->is_null()) return absl::OkStatus();
  if (!extras->is_array() && !extras->is_object()) {
    return settings.ErrorsFor(extra_key).Expected(extra_key, "an array or an object of tokens",
                                                  Json(*extras));
  }
  for (const auto& [name, value] : extras->items()) {
    const std::string key =
        absl::StrCat(extra_key, "[", extras->is_array() ? name : QuotedShort(name), "]");
    if (absl::Status s = collect(value, key, extra_key, extras->is_object() ? named : extra);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// transformers makes a named token special; an AddedToken without `normalized` then takes a special
// token's default, not normalized.
void MakeSpecial(const Json& spec, BpeModel::AddedToken* token) {
  token->special = true;
  const auto normalized = spec.find("normalized");
  if (normalized == spec.end() || normalized->is_null()) token->normalized = false;
}

// transformers' Qwen2Tokenizer (also under the name Qwen2TokenizerFast) adds every named and extra
// token again as AddedToken(content, special=True): special, no lstrip or rstrip, not normalized.
bool RemakesNamedTokensPlainSpecial(const ConfigJson& config) {
  const ConfigJson tokenizer_class = config.value("tokenizer_class", ConfigJson());
  return tokenizer_class == "Qwen2Tokenizer" || tokenizer_class == "Qwen2TokenizerFast";
}

// A named or extra token (not the BOS or EOS) that neither file holds: titan goes on without it.
void WarnTokenFoundNowhere(const ConfigToken& token, const std::string& json_path,
                           int64_t transformers_id) {
  LOG(WARNING) << token.errors->path() << ": " << token.key << ": " << QuotedShort(token.content())
               << " is neither an added token nor in " << json_path
               << "'s model.vocab: transformers would add it with id " << transformers_id
               << "; titan does not grow the vocabulary, so text holding it encodes as plain text";
}

}  // namespace

absl::Status ApplySpecialTokensMap(const ConfigJson& map, TokenSettings* settings) {
  const ConfigJson original = settings->json.is_object() ? settings->json : ConfigJson::object();
  const ConfigJson* config_extra = Find(original, "extra_special_tokens");
  settings->json = original;
  for (const auto& [key, value] : map.items()) {
    if (key == "extra_special_tokens" || key == "additional_special_tokens") {
      if (absl::Status s = ApplyMapExtras(key, value, original, settings); !s.ok()) return s;
      continue;
    }
    const bool attribute = IsTokenAttribute(key);
    // transformers reads any object here as an AddedToken, and no other key as a token.
    if (!attribute &&
        !(absl::EndsWith(key, "_token") && (value.is_string() || value.is_object()))) {
      continue;
    }
    absl::StatusOr<std::optional<ConfigToken>> token =
        ParseConfigToken(value, key, settings->map_errors);
    if (!token.ok()) return token.status();
    // The config's own model-specific token wins over the map's.
    const bool config_names_it =
        (original.contains(key) && IsModelSpecificToken(key, original[key])) ||
        (config_extra != nullptr && config_extra->is_object() && config_extra->contains(key));
    if (!attribute && config_names_it) continue;
    settings->json[key] = MapToken(value);
    settings->from_map.insert(key);
  }
  return absl::OkStatus();
}

absl::Status ParseConfigAddedTokens(const Json& decoder, const JsonErrors& errors,
                                    AddedTokenIds& ids, BpeModel* model) {
  if (!decoder.is_object())
    return errors.Expected("added_tokens_decoder", "an object of id -> token", decoder);
  std::vector<std::pair<BpeModel::AddedToken, std::string>> entries;  // With their keys.
  for (const auto& [id_text, spec] : decoder.items()) {
    const std::string key = absl::StrCat("added_tokens_decoder[", QuotedShort(id_text), "]");
    int64_t id = -1;
    if (!absl::SimpleAtoi(id_text, &id)) return errors.Error(key, "the key is not an integer id");
    absl::StatusOr<BpeModel::AddedToken> token =
        ParseAddedToken(spec, id, AddedTokenFields::kDefaulted, errors, key);
    if (!token.ok()) return token.status();
    entries.emplace_back(*std::move(token), key);
  }
  // The JSON object iterates its keys as strings ("128000" before "1998"): numeric order here.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.first.id < b.first.id; });
  for (auto& [token, key] : entries) {
    if (absl::Status s = ids.Add(std::move(token), errors, key, model); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<SpecialChoice> ChooseSpecialToken(
    const TokenSettings& settings, const char* key, const std::vector<std::string>& conventional,
    const BpeModel& model, const absl::flat_hash_map<std::string, int32_t>& vocab,
    const std::string& json_path) {
  const ConfigJson& config = settings.json;
  if (config.is_object() && config.contains(key)) {
    const JsonErrors& errors = settings.ErrorsFor(key);
    const std::string source = absl::StrCat(settings.SourceOf(key), " ", key);
    absl::StatusOr<std::optional<ConfigToken>> named = ParseConfigToken(config[key], key, errors);
    if (!named.ok()) return named.status();
    if (!named->has_value()) {
      return SpecialChoice{std::nullopt, "",
                           absl::StrCat(source, config[key].is_null() ? " is null" : " is empty")};
    }
    const std::string& name = (*named)->content();
    const std::optional<int32_t> id = TokenId(name, model, vocab);
    if (!id.has_value()) return NamedTokenMissing(errors, key, name, json_path);
    return SpecialChoice{id, name, source};
  }
  const std::string why =
      settings.has_config
          ? absl::StrCat(settings.has_map ? "tokenizer_config.json and special_tokens_map.json have"
                                          : "tokenizer_config.json has",
                         " no ", key)
          : absl::StrCat(
                "no tokenizer_config.json",
                settings.has_map ? absl::StrCat("; special_tokens_map.json has no ", key) : "");
  for (const std::string& name : conventional) {
    const std::optional<int32_t> id = TokenId(name, model, vocab);
    if (id.has_value()) return SpecialChoice{id, name, absl::StrCat(why, "; its usual name")};
  }
  return SpecialChoice{std::nullopt, "",
                       absl::StrCat(why, "; none of ", absl::StrJoin(conventional, ", "))};
}

absl::Status AddConfigTokens(const Json& root, const TokenSettings& settings,
                             const absl::flat_hash_map<std::string, int32_t>& vocab,
                             const std::string& json_path, AddedTokenIds& ids, BpeModel* model) {
  const ConfigJson& config = settings.json;
  std::vector<ConfigToken> named;
  std::vector<ConfigToken> extra;
  if (absl::Status s = CollectConfigTokens(settings, &named, &extra); !s.ok()) return s;
  absl::flat_hash_set<std::string> named_text;
  for (const ConfigToken& token : named) named_text.insert(token.content());
  absl::flat_hash_set<std::string> listed;
  for (const BpeModel::AddedToken& token : model->added_tokens) listed.insert(token.content);

  // What transformers adds again: the config's added_tokens_decoder, else tokenizer.json's
  // added_tokens (both parsed already: each entry has a string content).
  const Json& relisted = config.contains("added_tokens_decoder")
                             ? settings.added_tokens_decoder
                             : root.value("added_tokens", Json::array());
  for (const Json& spec : relisted) {
    if (!named_text.contains(spec["content"].get_ref<const std::string&>())) continue;
    for (BpeModel::AddedToken& token : model->added_tokens) {
      if (token.content == spec["content"]) MakeSpecial(spec, &token);
    }
  }
  named.insert(named.end(), extra.begin(), extra.end());
  // transformers gives the tokens found nowhere the next ids in this order (the config's keys in
  // the file's order).
  absl::flat_hash_set<std::string> missing;
  for (const ConfigToken& config_token : named) {
    if (listed.contains(config_token.content())) continue;
    const auto in_vocab = vocab.find(config_token.content());
    if (in_vocab == vocab.end()) {
      if (missing.insert(config_token.content()).second) {
        WarnTokenFoundNowhere(config_token, json_path,
                              ids.next_id() + static_cast<int64_t>(missing.size()) - 1);
      }
      continue;
    }
    absl::StatusOr<BpeModel::AddedToken> token =
        ParseAddedToken(config_token.spec, in_vocab->second, AddedTokenFields::kDefaulted,
                        *config_token.errors, config_token.key);
    if (!token.ok()) return token.status();
    if (named_text.contains(token->content)) MakeSpecial(config_token.spec, &*token);
    if (absl::Status s = ids.Add(*std::move(token), *config_token.errors, config_token.key, model);
        !s.ok()) {
      return s;
    }
  }
  if (RemakesNamedTokensPlainSpecial(config)) {
    absl::flat_hash_set<std::string> named_or_extra;
    for (const ConfigToken& token : named) named_or_extra.insert(token.content());
    for (BpeModel::AddedToken& token : model->added_tokens) {
      if (!named_or_extra.contains(token.content)) continue;
      token = BpeModel::AddedToken{token.content, token.id};
      token.special = true;
    }
  }
  return absl::OkStatus();
}

std::string Describe(const SpecialChoice& choice) {
  if (!choice.id.has_value()) return absl::StrCat("none (", choice.reason, ")");
  return absl::StrCat(choice.token, " = ", *choice.id, " (", choice.reason, ")");
}

}  // namespace titan
