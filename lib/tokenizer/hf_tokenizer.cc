#include "lib/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "glog/logging.h"
#include "lib/tokenizer/oniguruma_regex.h"
#include "lib/util/file_util.h"
#include "lib/util/short_text.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using Json = nlohmann::json;

// GPT-2's byte-level alphabet: every byte stands for one printable code point.
class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet() {
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      byte_of_code_point_[printable ? b : next++] = static_cast<uint8_t>(b);
    }
  }

  // The bytes a vocab string stands for; nullopt when a character is outside the alphabet.
  std::optional<std::string> ToBytes(const std::string& token) const {
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      const uint8_t lead = static_cast<uint8_t>(token[i]);
      uint32_t cp;
      if (lead < 0x80) {
        cp = lead;
        i += 1;
      } else if ((lead >> 5) == 0x6 && i + 1 < token.size()) {
        cp = ((lead & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
        i += 2;
      } else {
        return std::nullopt;  // The alphabet ends at U+0143: two UTF-8 bytes at most.
      }
      const auto it = byte_of_code_point_.find(cp);
      if (it == byte_of_code_point_.end()) return std::nullopt;
      bytes.push_back(static_cast<char>(it->second));
    }
    return bytes;
  }

 private:
  absl::flat_hash_map<uint32_t, uint8_t> byte_of_code_point_;
};

const ByteLevelAlphabet& Gpt2Alphabet() {
  static const ByteLevelAlphabet* const alphabet = new ByteLevelAlphabet();
  return *alphabet;
}

// Builds errors that name the file and the key.
class JsonErrors {
 public:
  explicit JsonErrors(std::string path) : path_(std::move(path)) {}
  absl::Status Error(const std::string& key, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", key, ": ", what));
  }
  absl::Status Expected(const std::string& key, const std::string& expected, const Json& got) const {
    // JsonForMessage names a structure's type itself.
    const std::string type = got.is_structured() ? "" : absl::StrCat(got.type_name(), " ");
    return Error(key, absl::StrCat("expected ", expected, ", got ", type, JsonForMessage(got)));
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The most nested arrays and objects a file may hold: serde_json's limit, so tokenizers refuses
// deeper files too. nlohmann copies, compares and dumps recursively: deeper would risk the stack.
constexpr int kMaxJsonNesting = 127;

absl::StatusOr<Json> ParseJsonFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::string top_level_key;                  // Of the value being parsed.
  std::optional<std::string> too_deep_under;  // The top-level key of the first value too deep.
  // nlohmann's parser itself is iterative; a value past the limit is dropped and reported.
  const Json::parser_callback_t bound_nesting = [&](int depth, Json::parse_event_t event,
                                                    Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1) top_level_key = parsed.get<std::string>();
    const bool opens =
        event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
    if (!opens || depth < kMaxJsonNesting) return true;
    if (!too_deep_under.has_value()) too_deep_under = top_level_key;
    return false;
  };
  Json json;
  try {
    json = Json::parse(*text, bound_nesting);
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": invalid JSON: ", e.what()));
  }
  if (too_deep_under.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", too_deep_under->empty() ? "" : ShortText(*too_deep_under) + ": ",
                     "nested deeper than ", kMaxJsonNesting,
                     " levels of arrays and objects (tokenizers' JSON parser allows no deeper)"));
  }
  if (!json.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": expected a JSON object"));
  return json;
}

// A boolean field that may be absent (its default) or null.
absl::StatusOr<bool> OptionalBool(const Json& object, const char* field, bool fallback,
                                  const JsonErrors& errors, const std::string& key) {
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return errors.Expected(absl::StrCat(key, ".", field), "a boolean", *it);
  return it->get<bool>();
}

absl::StatusOr<BpeModel::PreTokenizeStep> ParsePreTokenizer(const Json& spec, const JsonErrors& errors,
                                                            const std::string& key, bool* byte_level) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return errors.Expected(key, "an object with a \"type\"", spec);
  }
  const std::string type = spec["type"].get<std::string>();
  BpeModel::PreTokenizeStep step;
  if (type == "ByteLevel") {
    *byte_level = true;
    absl::StatusOr<bool> prefix = OptionalBool(spec, "add_prefix_space", true, errors, key);
    if (!prefix.ok()) return prefix.status();
    absl::StatusOr<bool> use_regex = OptionalBool(spec, "use_regex", true, errors, key);
    if (!use_regex.ok()) return use_regex.status();
    step.add_prefix_space = *prefix;
    if (*use_regex) {
      // tokenizers runs this regex with Oniguruma too.
      absl::StatusOr<std::string> regex = OnigurumaToPcre2(kGpt2SplitRegex);
      if (!regex.ok()) return regex.status();
      step.split_regex = *std::move(regex);
    }
    return step;
  }
  if (type == "Split") {
    const auto pattern = spec.find("pattern");
    if (pattern == spec.end() || !pattern->is_object() || !pattern->contains("Regex") ||
        !(*pattern)["Regex"].is_string()) {
      return errors.Expected(key + ".pattern", "{\"Regex\": \"...\"}",
                             pattern == spec.end() ? Json() : *pattern);
    }
    const Json behavior = spec.value("behavior", Json("Isolated"));
    if (behavior != "Isolated") return errors.Expected(key + ".behavior", "\"Isolated\"", behavior);
    absl::StatusOr<bool> invert = OptionalBool(spec, "invert", false, errors, key);
    if (!invert.ok()) return invert.status();
    if (*invert) return errors.Error(key + ".invert", "true is not supported");
    absl::StatusOr<std::string> regex = OnigurumaToPcre2((*pattern)["Regex"].get<std::string>());
    if (!regex.ok())
      return errors.Error(key + ".pattern.Regex", std::string(regex.status().message()));
    step.split_regex = *std::move(regex);
    return step;
  }
  return errors.Error(key + ".type", absl::StrCat("unsupported pre-tokenizer ", QuotedShort(type),
                                                  " (supported: ByteLevel, Split, Sequence)"));
}

// Fills `model->pre_tokenizer` from the tokenizer.json "pre_tokenizer".
absl::Status ParsePreTokenizers(const Json& root, const JsonErrors& errors, BpeModel* model) {
  const Json spec = root.value("pre_tokenizer", Json());
  bool byte_level = false;
  if (spec.is_object() && spec.value("type", "") == "Sequence") {
    const auto list = spec.find("pretokenizers");
    if (list == spec.end() || !list->is_array()) {
      return errors.Expected("pre_tokenizer.pretokenizers", "an array",
                             list == spec.end() ? Json() : *list);
    }
    for (size_t i = 0; i < list->size(); ++i) {
      absl::StatusOr<BpeModel::PreTokenizeStep> step = ParsePreTokenizer(
          (*list)[i], errors, absl::StrCat("pre_tokenizer.pretokenizers[", i, "]"), &byte_level);
      if (!step.ok()) return step.status();
      model->pre_tokenizer.push_back(*std::move(step));
    }
  } else if (!spec.is_null()) {
    absl::StatusOr<BpeModel::PreTokenizeStep> step =
        ParsePreTokenizer(spec, errors, "pre_tokenizer", &byte_level);
    if (!step.ok()) return step.status();
    model->pre_tokenizer.push_back(*std::move(step));
  }
  if (!byte_level) {
    return errors.Error("pre_tokenizer", "no ByteLevel pre-tokenizer: only byte-level BPE is supported");
  }
  return absl::OkStatus();
}

// Sets `model->nfc` from the tokenizer.json "normalizer": null, NFC (Qwen2/2.5/3) or a Sequence
// of NFCs; other normalizers are refused.
absl::Status ParseNormalizer(const Json& root, const JsonErrors& errors, BpeModel* model) {
  const Json normalizer = root.value("normalizer", Json());
  if (normalizer.is_null()) return absl::OkStatus();
  const auto is_nfc = [](const Json& spec) {
    return spec.is_object() && spec.value("type", Json()) == "NFC";
  };
  std::vector<Json> steps;
  if (normalizer.is_object() && normalizer.value("type", Json()) == "Sequence") {
    const Json list = normalizer.value("normalizers", Json());
    if (!list.is_array()) return errors.Expected("normalizer.normalizers", "an array", list);
    steps.assign(list.begin(), list.end());
  } else {
    steps.push_back(normalizer);
  }
  for (const Json& step : steps) {
    if (!is_nfc(step)) {
      return errors.Expected("normalizer", "null, {\"type\": \"NFC\"} or a Sequence of them",
                             normalizer);
    }
  }
  model->nfc = !steps.empty();
  return absl::OkStatus();
}

absl::Status CheckUnsupportedOptions(const Json& bpe, const JsonErrors& errors) {
  const Json dropout = bpe.value("dropout", Json());
  if (!dropout.is_null() && !(dropout.is_number() && dropout.get<double>() == 0.0)) {
    return errors.Expected("model.dropout", "null (BPE dropout is not supported)", dropout);
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json value = bpe.value(field, Json());
    if (!value.is_null() && value != "") {
      return errors.Expected(absl::StrCat("model.", field), "null (not supported)", value);
    }
  }
  absl::StatusOr<bool> byte_fallback = OptionalBool(bpe, "byte_fallback", false, errors, "model");
  if (!byte_fallback.ok()) return byte_fallback.status();
  if (*byte_fallback) return errors.Error("model.byte_fallback", "true is not supported");
  return absl::OkStatus();
}

// Records `bytes` as what `id` decodes to, growing the table.
void SetIdBytes(int32_t id, std::string bytes, BpeModel* model) {
  if (static_cast<size_t>(id) >= model->id_to_bytes.size()) model->id_to_bytes.resize(id + 1);
  model->id_to_bytes[id] = std::move(bytes);
}

// The bytes HF's ByteLevel decoder gives `token`: a token with characters outside the alphabet
// stays its UTF-8.
std::string DecodedBytes(const std::string& token) {
  return Gpt2Alphabet().ToBytes(token).value_or(token);
}

absl::Status ParseVocabAndMerges(const Json& bpe, const JsonErrors& errors, BpeModel* model,
                                 absl::flat_hash_map<std::string, int32_t>* vocab) {
  const auto vocab_it = bpe.find("vocab");
  if (vocab_it == bpe.end()) return errors.Error("model.vocab", "missing");
  if (!vocab_it->is_object()) return errors.Expected("model.vocab", "an object of token -> id", *vocab_it);
  for (const auto& [token, id_json] : vocab_it->items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX) {
      return errors.Expected(absl::StrCat("model.vocab[", QuotedShort(token), "]"),
                             "a non-negative id", id_json);
    }
    const int32_t id = id_json.get<int32_t>();
    vocab->emplace(token, id);
    SetIdBytes(id, DecodedBytes(token), model);
    std::optional<std::string> bytes = Gpt2Alphabet().ToBytes(token);
    if (bytes.has_value()) model->bytes_to_id.emplace(*std::move(bytes), id);
  }

  const auto merges_it = bpe.find("merges");
  if (merges_it == bpe.end() || merges_it->is_null()) return absl::OkStatus();
  if (!merges_it->is_array()) return errors.Expected("model.merges", "an array", *merges_it);
  for (size_t i = 0; i < merges_it->size(); ++i) {
    const Json& merge = (*merges_it)[i];
    const std::string key = absl::StrCat("model.merges[", i, "]");
    std::string left, right;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos) return errors.Expected(key, "\"left right\"", merge);
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return errors.Expected(key, "\"left right\" or [\"left\", \"right\"]", merge);
    }
    const auto l = vocab->find(left);
    const auto r = vocab->find(right);
    const auto m = vocab->find(left + right);
    for (const auto& [it, name] : {std::pair{l, &left}, std::pair{r, &right}}) {
      if (it == vocab->end())
        return errors.Error(key,
                            absl::StrCat("token ", QuotedShort(*name), " is not in model.vocab"));
    }
    if (m == vocab->end()) {
      return errors.Error(
          key, absl::StrCat("merged token ", QuotedShort(left + right), " is not in model.vocab"));
    }
    // A repeated pair keeps its last rank, as HF's map does.
    model->merges.insert_or_assign({l->second, r->second},
                                   BpeModel::Merge{static_cast<int32_t>(i), m->second});
  }
  return absl::OkStatus();
}

absl::StatusOr<BpeModel::AddedToken> ParseAddedToken(const Json& spec, int64_t id,
                                                     const JsonErrors& errors, const std::string& key) {
  if (!spec.is_object() || !spec.contains("content") || !spec["content"].is_string()) {
    return errors.Expected(key, "an object with a string \"content\"", spec);
  }
  if (id < 0 || id > INT32_MAX) return errors.Error(key + ".id", absl::StrCat("bad id ", id));
  BpeModel::AddedToken token;
  token.content = spec["content"].get<std::string>();
  token.id = static_cast<int32_t>(id);
  if (token.content.empty()) return errors.Error(key + ".content", "empty");
  absl::StatusOr<bool> single_word = OptionalBool(spec, "single_word", false, errors, key);
  if (!single_word.ok()) return single_word.status();
  if (*single_word) return errors.Error(key + ".single_word", "true is not supported");
  for (auto [field, out] : {std::pair{"lstrip", &token.lstrip}, std::pair{"rstrip", &token.rstrip}}) {
    absl::StatusOr<bool> value = OptionalBool(spec, field, false, errors, key);
    if (!value.ok()) return value.status();
    *out = *value;
  }
  // HF's default for a token without the field is normalized unless special.
  absl::StatusOr<bool> special = OptionalBool(spec, "special", false, errors, key);
  if (!special.ok()) return special.status();
  absl::StatusOr<bool> normalized = OptionalBool(spec, "normalized", !*special, errors, key);
  if (!normalized.ok()) return normalized.status();
  token.normalized = *normalized;
  token.special = *special;
  return token;
}

// The ids HF's tokenizers gives added tokens, whatever id a file wrote for them (it only warns):
// one in model.vocab keeps its vocab id, any other takes the next free id after model.vocab's
// entries and the added tokens so far. transformers adds tokenizer_config.json's the same way.
class AddedTokenIds {
 public:
  explicit AddedTokenIds(const absl::flat_hash_map<std::string, int32_t>& vocab)
      : vocab_(vocab), next_id_(static_cast<int64_t>(vocab.size())) {}

  // Gives `token` its id; false when its content already has one (listed twice).
  absl::StatusOr<bool> Assign(BpeModel::AddedToken& token, const JsonErrors& errors,
                              const std::string& key) {
    if (!known_.insert(token.content).second) return false;
    const int32_t declared = token.id;
    const auto in_vocab = vocab_.find(token.content);
    if (in_vocab != vocab_.end()) {
      token.id = in_vocab->second;
    } else {
      if (next_id_ > INT32_MAX) return errors.Error(key, "no id left below 2^31");
      token.id = static_cast<int32_t>(next_id_);
    }
    next_id_ = std::max<int64_t>(next_id_, int64_t{token.id} + 1);
    LOG_IF(WARNING, token.id != declared)
        << errors.path() << ": " << key << " " << QuotedShort(token.content) << " has id "
        << token.id << " (as transformers and tokenizers give it: "
        << (in_vocab != vocab_.end() ? "model.vocab's id" : "the next free id") << "), not "
        << declared;
    return true;
  }

  // The id the next token outside model.vocab gets.
  int64_t next_id() const { return next_id_; }

 private:
  const absl::flat_hash_map<std::string, int32_t>& vocab_;
  absl::flat_hash_set<std::string> known_;
  int64_t next_id_;
};

// An added token listed again (twice in tokenizer.json, or in tokenizer_config.json's
// added_tokens_decoder too) keeps its id and takes the later listing's matching settings, as
// tokenizers' add_tokens does (transformers adds the config's entries with it); a token once
// special stays in its special set.
void ListAgain(const BpeModel::AddedToken& later, BpeModel* model) {
  for (BpeModel::AddedToken& listed : model->added_tokens) {
    if (listed.content != later.content) continue;
    listed.lstrip = later.lstrip;
    listed.rstrip = later.rstrip;
    listed.normalized = later.normalized;
    listed.special = listed.special || later.special;
  }
}

absl::Status ParseAddedTokens(const Json& root, const JsonErrors& errors, AddedTokenIds& ids,
                              BpeModel* model) {
  const Json list = root.value("added_tokens", Json::array());
  if (!list.is_array()) return errors.Expected("added_tokens", "an array", list);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = absl::StrCat("added_tokens[", i, "]");
    const Json id = list[i].is_object() ? list[i].value("id", Json()) : Json();
    if (!id.is_number_integer()) return errors.Expected(key + ".id", "an integer", id);
    absl::StatusOr<BpeModel::AddedToken> token = ParseAddedToken(list[i], id.get<int64_t>(), errors, key);
    if (!token.ok()) return token.status();
    absl::StatusOr<bool> added = ids.Assign(*token, errors, key);
    if (!added.ok()) return added.status();
    if (*added) {
      model->added_tokens.push_back(*std::move(token));
    } else {
      ListAgain(*token, model);
    }
  }
  return absl::OkStatus();
}

// Adds tokenizer_config.json's added_tokens_decoder entries that tokenizer.json lacks, in the
// order of their ids (transformers' order; a config whose ids run past tokenizer.json's
// vocabulary gets them packed after it; torchtitan's loader too); an entry for a token
// tokenizer.json already adds changes its lstrip/rstrip/normalized/special as in ListAgain.
absl::Status ParseConfigAddedTokens(const Json& config, const JsonErrors& errors,
                                    AddedTokenIds& ids, BpeModel* model) {
  const Json decoder = config.value("added_tokens_decoder", Json::object());
  if (!decoder.is_object()) return errors.Expected("added_tokens_decoder", "an object of id -> token", decoder);
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

// The id of `name` as an added token or in the vocab, as HF's token_to_id.
std::optional<int32_t> TokenId(const std::string& name, const BpeModel& model,
                               const absl::flat_hash_map<std::string, int32_t>& vocab) {
  for (const BpeModel::AddedToken& token : model.added_tokens) {
    if (token.content == name) return token.id;
  }
  const auto it = vocab.find(name);
  if (it != vocab.end()) return it->second;
  return std::nullopt;
}

// The BOS or EOS: its id (none: the tokenizer has none), its text and why it was chosen.
struct SpecialChoice {
  std::optional<int32_t> id;
  std::string token;
  std::string reason;
};

// A token tokenizer_config.json names (bos_token, pad_token, image_token, an extra special token):
// the key naming it and its AddedToken; a plain string stands for {"content": string, "special":
// true}, as transformers makes it.
struct ConfigToken {
  std::string key;
  Json spec;
  const std::string& content() const { return spec["content"].get_ref<const std::string&>(); }
};

// `value` of `key` as a token: a string or {"content": ...}; nullopt for null.
absl::StatusOr<std::optional<ConfigToken>> ParseConfigToken(const Json& value,
                                                            const std::string& key,
                                                            const JsonErrors& errors) {
  if (value.is_null()) return std::nullopt;
  if (value.is_string()) {
    return ConfigToken{key, Json::object({{"content", value}, {"special", true}})};
  }
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return ConfigToken{key, value};
  }
  return errors.Expected(key, "a token string, {\"content\": ...} or null", value);
}

// A BOS or EOS tokenizer_config.json names that neither file holds.
absl::Status NamedTokenMissing(const JsonErrors& config_errors, const std::string& key,
                               const std::string& name, const std::string& json_path) {
  return config_errors.Error(
      key, absl::StrCat(QuotedShort(name), " is neither an added token nor in ", json_path,
                        "'s model.vocab (transformers would add it with a new id; titan does not "
                        "grow the vocabulary for a token name)"));
}

// tokenizer_config.json's `key` (bos_token, eos_token) decides, as in transformers and
// torchtitan: a token (a string or {"content": ...}) that must exist, or null for none. Without a
// config or the key, the first of `conventional` that exists, else none.
absl::StatusOr<SpecialChoice> ChooseSpecialToken(
    const Json& config, const JsonErrors& config_errors, const char* key,
    const std::vector<std::string>& conventional, const BpeModel& model,
    const absl::flat_hash_map<std::string, int32_t>& vocab, const std::string& json_path) {
  const bool configured = config.is_object() && config.contains(key);
  if (configured) {
    absl::StatusOr<std::optional<ConfigToken>> named =
        ParseConfigToken(config[key], key, config_errors);
    if (!named.ok()) return named.status();
    if (!named->has_value()) {
      return SpecialChoice{std::nullopt, "",
                           absl::StrCat("tokenizer_config.json ", key, " is null")};
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

// transformers' named token attributes; other keys ending in _token name tokens too.
constexpr std::array<const char*, 7> kTokenAttributes = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

// The tokens tokenizer_config.json names, as transformers 5.24 collects them: `named` (the seven
// attributes; any other *_token key holding a string or an {"__type": "AddedToken"} object; an
// extra_special_tokens object's entries) and `extra` (an extra_special_tokens list, else
// additional_special_tokens').
absl::Status CollectConfigTokens(const Json& config, const JsonErrors& errors,
                                 std::vector<ConfigToken>* named, std::vector<ConfigToken>* extra) {
  const auto collect = [&](const Json& value, const std::string& key,
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
    const bool added_token = value.is_object() && value.value("__type", Json()) == "AddedToken";
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
    return errors.Expected(extra_key, "an array or an object of tokens", *extras);
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

// Applies tokenizer_config.json's named and extra tokens as AutoTokenizer does. It adds again the
// added tokens of tokenizer_config.json's added_tokens_decoder (without that key, tokenizer.json's
// added_tokens), a named one as special; a named or extra token that is not an added token becomes
// one with its model.vocab id, matched whole before pre-tokenization, special unless it is an extra
// token written as an AddedToken object that is not. For a token found nowhere transformers
// would add it with a new id; titan warns and goes on (a pad or image token is often never in
// the text it trains on), while ChooseSpecialToken has refused a BOS or EOS found nowhere.
absl::Status AddConfigTokens(const Json& root, const Json& config, const JsonErrors& config_errors,
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
  const auto json_added = root.find("added_tokens");
  const Json* relisted = decoder != config.end()    ? &*decoder
                         : json_added != root.end() ? &*json_added
                                                    : nullptr;
  if (relisted != nullptr) {
    for (const Json& spec : *relisted) {
      if (!named_text.contains(spec["content"].get_ref<const std::string&>())) continue;
      for (BpeModel::AddedToken& token : model->added_tokens) {
        if (token.content == spec["content"]) MakeSpecial(spec, &token);
      }
    }
  }
  named.insert(named.end(), extra.begin(), extra.end());
  // transformers gives the tokens found nowhere the next ids, in this order.
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

// For the log: "<token> = <id> (<reason>)", or "none (<reason>)".
std::string Describe(const SpecialChoice& choice) {
  if (!choice.id.has_value()) return absl::StrCat("none (", choice.reason, ")");
  return absl::StrCat(choice.token, " = ", *choice.id, " (", choice.reason, ")");
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BuildFromJson(const Json& root, const Json& config,
                                                             const JsonErrors& errors,
                                                             const std::string& config_path) {
  const auto model_it = root.find("model");
  // Not `found ? *model_it : Json()`: that copies the value, recursively, however deep.
  if (model_it == root.end()) return errors.Expected("model", "an object", Json());
  if (!model_it->is_object()) return errors.Expected("model", "an object", *model_it);
  const Json& bpe = *model_it;
  const Json type = bpe.value("type", Json("BPE"));
  if (type != "BPE") return errors.Expected("model.type", "\"BPE\"", type);

  BpeModel model;
  if (absl::Status s = CheckUnsupportedOptions(bpe, errors); !s.ok()) return s;
  if (absl::Status s = ParseNormalizer(root, errors, &model); !s.ok()) return s;
  if (absl::Status s = ParsePreTokenizers(root, errors, &model); !s.ok()) return s;
  absl::flat_hash_map<std::string, int32_t> vocab;
  if (absl::Status s = ParseVocabAndMerges(bpe, errors, &model, &vocab); !s.ok()) return s;
  absl::StatusOr<bool> ignore_merges = OptionalBool(bpe, "ignore_merges", false, errors, "model");
  if (!ignore_merges.ok()) return ignore_merges.status();
  model.ignore_merges = *ignore_merges;
  absl::StatusOr<bool> fuse_unk = OptionalBool(bpe, "fuse_unk", false, errors, "model");
  if (!fuse_unk.ok()) return fuse_unk.status();
  model.fuse_unk = *fuse_unk;
  const Json unk = bpe.value("unk_token", Json());
  if (unk.is_string()) {
    const auto it = vocab.find(unk.get<std::string>());
    if (it == vocab.end())
      return errors.Error("model.unk_token", absl::StrCat(QuotedShort(unk.get<std::string>()),
                                                          " is not in model.vocab"));
    model.unk_id = it->second;
  } else if (!unk.is_null()) {
    return errors.Expected("model.unk_token", "a string or null", unk);
  }

  AddedTokenIds added_ids(vocab);
  if (absl::Status s = ParseAddedTokens(root, errors, added_ids, &model); !s.ok()) return s;
  if (!config.is_null()) {
    const JsonErrors config_file(config_path);
    if (absl::Status s = ParseConfigAddedTokens(config, config_file, added_ids, &model); !s.ok()) {
      return s;
    }
  }
  // Where model.vocab's ids leave gaps, tokenizers' next free id (counted from its number of
  // entries) can be a vocab entry's: one id for two strings, refused.
  absl::flat_hash_map<int32_t, const std::string*> vocab_text;
  for (const auto& [text, id] : vocab) vocab_text.emplace(id, &text);
  for (const BpeModel::AddedToken& token : model.added_tokens) {
    const auto taken = vocab_text.find(token.id);
    if (taken != vocab_text.end() && *taken->second != token.content) {
      return errors.Error("added_tokens",
                          absl::StrCat(QuotedShort(token.content), " would have id ", token.id,
                                       " (tokenizers' next id after model.vocab's ", vocab.size(),
                                       " entries), model.vocab's ", QuotedShort(*taken->second),
                                       ": an added token needs an id of its own"));
    }
    // tokenizers decodes added tokens through the ByteLevel decoder too ("Ġb" is " b").
    SetIdBytes(token.id, DecodedBytes(token.content), &model);
  }

  const JsonErrors config_errors(config_path);
  absl::StatusOr<SpecialChoice> bos =
      ChooseSpecialToken(config, config_errors, "bos_token", {"<|begin_of_text|>", "<s>", "<bos>"},
                         model, vocab, errors.path());
  if (!bos.ok()) return bos.status();
  absl::StatusOr<SpecialChoice> eos = ChooseSpecialToken(
      config, config_errors, "eos_token", {"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>"},
      model, vocab, errors.path());
  if (!eos.ok()) return eos.status();
  if (config.is_object()) {
    if (absl::Status s =
            AddConfigTokens(root, config, config_errors, vocab, errors.path(), added_ids, &model);
        !s.ok()) {
      return s;
    }
  }
  // Documents end with EOS and generation stops at it: a tokenizer without one is unusable.
  if (!eos->id.has_value()) {
    constexpr char kNeed[] = "titan needs an EOS: it ends documents and stops generation";
    if (config.is_object() && config.contains("eos_token")) {
      return config_errors.Error("eos_token", absl::StrCat("null, but ", kNeed));
    }
    return absl::InvalidArgumentError(absl::StrCat(config.is_object() ? config_path : errors.path(),
                                                   ": no EOS token (", eos->reason, "): ", kNeed));
  }
  model.bos_id = bos->id;
  model.eos_id = *eos->id;
  LOG(INFO) << "Tokenizer " << errors.path() << ": BOS " << Describe(*bos) << ", EOS "
            << Describe(*eos);

  absl::StatusOr<std::unique_ptr<BpeTokenizer>> tokenizer = BpeTokenizer::Create(std::move(model));
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(errors.path(), ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> LoadHfTokenizer(const std::string& json_path,
                                                              const std::string& config_path) {
  absl::StatusOr<Json> root = ParseJsonFile(json_path);
  if (!root.ok()) return root.status();
  Json config;
  if (!config_path.empty()) {
    absl::StatusOr<Json> parsed = ParseJsonFile(config_path);
    if (!parsed.ok()) return parsed.status();
    config = *std::move(parsed);
  }
  // Typed accessors above check before reading; this catches what a malformed file could still trip.
  try {
    return BuildFromJson(*root, config, JsonErrors(json_path), config_path);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": malformed tokenizer: ", e.what()));
  }
}

}  // namespace titan
