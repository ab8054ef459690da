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
  return ConfigToken{key, std::move(spec)};
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

// The tokens tokenizer_config.json names, as transformers 5.24 collects them: `named` (the seven
// attributes; any other *_token key holding a string or an {"__type": "AddedToken"} object; an
// extra_special_tokens object's entries) and `extra` (an extra_special_tokens list, else
// additional_special_tokens').
absl::Status CollectConfigTokens(const ConfigJson& config, const JsonErrors& errors,
                                 std::vector<ConfigToken>* named, std::vector<ConfigToken>* extra) {
  const auto collect = [&](const ConfigJson& value, const std::string& key,
                           std::vector<ConfigToken>* to) -> absl::Status {
    absl::StatusOr<std::optional<ConfigToken>> token = ParseConfigToken(value, key, errors);
    if (!token.ok()) return token.status();
    if (token->has_value()) to->push_back(**std::move(token));
    return absl::OkStatus();
  };
  for (const char* key : kTokenAttributes) {
    if (!config.contains(key)) continue;
    if (absl::Status s = collect(config[key], key, named); !s.ok()) return s;
  }
  for (const auto& [key, value] : config.items()) {
    const bool attribute =
        std::find(kTokenAttributes.begin(), kTokenAttributes.end(), key) != kTokenAttributes.end();
    // transformers reads a plain object here as no token at all.
    const bool added_token =
        value.is_object() && value.value("__type", ConfigJson()) == "AddedToken";
    if (attribute || !absl::EndsWith(key, "_token") || !(value.is_string() || added_token)) {
      continue;
    }
    if (absl::Status s = collect(value, key, named); !s.ok()) return s;
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
    return errors.Expected(extra_key, "an array or an object of tokens", Json(*extras));
  }
  for (const auto& [name, value] : extras->items()) {
    const std::string key =
        absl::StrCat(extra_key, "[", extras->is_array() ? name : QuotedShort(name), "]");
    if (absl::Status s = collect(value, key, extras->is_object() ? named : extra); !s.ok()) {
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

// A named or extra token (not the BOS or EOS) that neither file holds: titan goes on without it.
void WarnTokenFoundNowhere(const JsonErrors& config_errors, const ConfigToken& token,
                           const std::string& json_path, int64_t transformers_id) {
  LOG(WARNING) << config_errors.path() << ": " << token.key << ": " << QuotedShort(token.content())
               << " is neither an added token nor in " << json_path
               << "'s model.vocab: transformers would add it with id " << transformers_id
               << "; titan does not grow the vocabulary, so text holding it encodes as plain text";
}

}  // namespace

absl::Status ParseConfigAddedTokens(const ConfigJson& config, const JsonErrors& errors,
                                    AddedTokenIds& ids, BpeModel* model) {
  const Json decoder(config.value("added_tokens_decoder", ConfigJson::object()));
  if (!decoder.is_object())
    return errors.Expected("added_tokens_decoder", "an object of id -> token", decoder);
  std::vector<std::pair<BpeModel::AddedToken, std::string>> entries;  // With their keys.
  for (const auto& [id_text, spec] : decoder.items()) {
    const std::string key = absl::StrCat("added_tokens_decoder[", QuotedShort(id_text), "]");
    int64_t id = -1;
    if (!absl::SimpleAtoi(id_text, &id)) return errors.Error(key, "the key is not an integer id");
    absl::StatusOr<BpeModel::AddedToken> token = ParseAddedToken(spec, id, errors, key);
    if (!token.ok()) return token.status();
    entries.emplace_back(*std::move(token), key);
  }
  // The JSON object iterates its keys as strings ("128000" before "1998"): numeric order here.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.first.id < b.first.id; });
  for (auto& [token, key] : entries) {
    absl::StatusOr<bool> added = ids.Assign(token, errors, key);
    if (!added.ok()) return added.status();
    if (*added) {
      model->added_tokens.push_back(std::move(token));
    } else {
      ListAgain(token, model);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SpecialChoice> ChooseSpecialToken(
    const ConfigJson& config, const JsonErrors& config_errors, const char* key,
    const std::vector<std::string>& conventional, const BpeModel& model,
    const absl::flat_hash_map<std::string, int32_t>& vocab, const std::string& json_path) {
  const bool configured = config.is_object() && config.contains(key);
  if (configured) {
    absl::StatusOr<std::optional<ConfigToken>> named =
        ParseConfigToken(config[key], key, config_errors);
    if (!named.ok()) return named.status();
    if (!named->has_value()) {
      return SpecialChoice{std::nullopt, "",
                           absl::StrCat("tokenizer_config.json ", key,
                                        config[key].is_null() ? " is null" : " is empty")};
    }
    const std::string& name = (*named)->content();
    const std::optional<int32_t> id = TokenId(name, model, vocab);
    if (!id.has_value()) return NamedTokenMissing(config_errors, key, name, json_path);
    return SpecialChoice{id, name, absl::StrCat("tokenizer_config.json ", key)};
  }
  const std::string why = config.is_object() ? absl::StrCat("tokenizer_config.json has no ", key)
                                             : std::string("no tokenizer_config.json");
  for (const std::string& name : conventional) {
    const std::optional<int32_t> id = TokenId(name, model, vocab);
    if (id.has_value()) return SpecialChoice{id, name, absl::StrCat(why, "; its usual name")};
  }
  return SpecialChoice{std::nullopt, "",
                       absl::StrCat(why, "; none of ", absl::StrJoin(conventional, ", "))};
}

absl::Status AddConfigTokens(const Json& root, const ConfigJson& config,
                             const JsonErrors& config_errors,
                             const absl::flat_hash_map<std::string, int32_t>& vocab,
                             const std::string& json_path, AddedTokenIds& ids, BpeModel* model) {
  std::vector<ConfigToken> named;
  std::vector<ConfigToken> extra;
  if (absl::Status s = CollectConfigTokens(config, config_errors, &named, &extra); !s.ok()) {
    return s;
  }
  absl::flat_hash_set<std::string> named_text;
  for (const ConfigToken& token : named) named_text.insert(token.content());
  absl::flat_hash_set<std::string> listed;
  for (const BpeModel::AddedToken& token : model->added_tokens) listed.insert(token.content);

  // What transformers adds again: the config's added_tokens_decoder, else tokenizer.json's
  // added_tokens (both parsed already: each entry has a string content).
  const auto decoder = config.find("added_tokens_decoder");
  const Json relisted =
      decoder != config.end() ? Json(*decoder) : root.value("added_tokens", Json::array());
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
        WarnTokenFoundNowhere(config_errors, config_token, json_path,
                              ids.next_id() + static_cast<int64_t>(missing.size()) - 1);
      }
      continue;
    }
    absl::StatusOr<BpeModel::AddedToken> token =
        ParseAddedToken(config_token.spec, in_vocab->second, config_errors, config_token.key);
    if (!token.ok()) return token.status();
    if (named_text.contains(token->content)) MakeSpecial(config_token.spec, &*token);
    absl::StatusOr<bool> added = ids.Assign(*token, config_errors, config_token.key);
    if (!added.ok()) return added.status();
    if (*added) {
      model->added_tokens.push_back(*std::move(token));
    } else {
      ListAgain(*token, model);
    }
  }
  return absl::OkStatus();
}

std::string Describe(const SpecialChoice& choice) {
  if (!choice.id.has_value()) return absl::StrCat("none (", choice.reason, ")");
  return absl::StrCat(choice.token, " = ", *choice.id, " (", choice.reason, ")");
}

}  // namespace titan
