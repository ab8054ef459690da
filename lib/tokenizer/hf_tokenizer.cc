#include "lib/tokenizer/hf_tokenizer.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "lib/tokenizer/added_tokens.h"
#include "lib/tokenizer/config_tokens.h"
#include "lib/tokenizer/oniguruma_regex.h"
#include "lib/tokenizer/post_processor.h"
#include "lib/util/file_util.h"
#include "lib/util/json_file.h"
#include "lib/util/short_text.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

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

// The most nested arrays and objects a file may hold: serde_json's limit, so tokenizers refuses
// deeper files too. nlohmann copies, compares and dumps recursively: deeper would risk the stack.
constexpr int kMaxJsonNesting = 127;

// JsonT: Json, or ConfigJson to keep the keys in the file's order. The value of the top-level key
// `apart` (if given and present) goes to `*apart_value` instead, and is an empty object or array in
// the result: the callback parser and ordered objects take quadratic time over a wide object's
// keys (tokenizer_config.json's 60,000-entry added_tokens_decoder took minutes).
template <typename JsonT>
absl::StatusOr<JsonT> ParseJsonFile(const std::string& path, const char* apart = nullptr,
                                    Json* apart_value = nullptr) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::string top_level_key;                  // Of the value being parsed.
  std::optional<std::string> too_deep_under;  // The top-level key of the first value too deep.
  // nlohmann's parser itself is iterative; a value past the limit is dropped and reported.
  const typename JsonT::parser_callback_t bound_nesting =
      [&](int depth, typename JsonT::parse_event_t event, JsonT& parsed) {
        if (event == JsonT::parse_event_t::key && depth == 1)
          top_level_key = parsed.template get<std::string>();
        // Dropped, not stored (its nested values are still visited: the bound holds for them).
        if (depth == 2 && apart != nullptr && top_level_key == apart &&
            event != JsonT::parse_event_t::object_end && event != JsonT::parse_event_t::array_end) {
          return false;
        }
        const bool opens = event == JsonT::parse_event_t::object_start ||
                           event == JsonT::parse_event_t::array_start;
        if (!opens || depth < kMaxJsonNesting) return true;
        if (!too_deep_under.has_value()) too_deep_under = top_level_key;
        return false;
      };
  absl::StatusOr<JsonT> json = ParseJsonText<JsonT>(*text, path, bound_nesting);
  if (!json.ok()) return json.status();
  if (too_deep_under.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", too_deep_under->empty() ? "" : ShortText(*too_deep_under) + ": ",
                     "nested deeper than ", kMaxJsonNesting,
                     " levels of arrays and objects (titan's limit, which tokenizers sets for "
                     "tokenizer.json; transformers reads a deeper tokenizer_config.json)"));
  }
  if (!json->is_object())
    return absl::InvalidArgumentError(absl::StrCat(path, ": expected a JSON object"));
  if (apart != nullptr && json->contains(apart)) {
    // Without a callback, which the bound above no longer needs.
    Json whole = Json::parse(*text);
    *apart_value = std::move(whole[apart]);
  }
  return json;
}

// `spec` is the whole "pre_tokenizer" or, `in_sequence`, one of a Sequence's "pretokenizers".
absl::StatusOr<BpeModel::PreTokenizeStep> ParsePreTokenizer(const Json& spec,
                                                            const JsonErrors& errors,
                                                            const std::string& key,
                                                            bool in_sequence, bool* byte_level) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return errors.Expected(key, "an object with a \"type\"", spec);
  }
  const std::string type = spec["type"].get<std::string>();
  BpeModel::PreTokenizeStep step;
  if (type == "ByteLevel") {
    *byte_level = true;
    absl::StatusOr<bool> prefix = RequiredBool(spec, "add_prefix_space", errors, key);
    if (!prefix.ok()) return prefix.status();
    // Unused (offsets only), but tokenizers refuses a ByteLevel without it.
    if (absl::StatusOr<bool> trim = RequiredBool(spec, "trim_offsets", errors, key); !trim.ok()) {
      return trim.status();
    }
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
    const auto behavior = spec.find("behavior");
    if (behavior == spec.end()) {
      return errors.Error(key + ".behavior", "missing (tokenizers requires it)");
    }
    if (*behavior != "Isolated") {
      return errors.Expected(key + ".behavior", "\"Isolated\"", *behavior);
    }
    absl::StatusOr<bool> invert = RequiredBool(spec, "invert", errors, key);
    if (!invert.ok()) return invert.status();
    if (*invert) return errors.Error(key + ".invert", "true is not supported");
    absl::StatusOr<std::string> regex = OnigurumaToPcre2((*pattern)["Regex"].get<std::string>());
    if (!regex.ok())
      return errors.Error(key + ".pattern.Regex", std::string(regex.status().message()));
    step.split_regex = *std::move(regex);
    return step;
  }
  if (in_sequence && type == "Sequence") {
    return errors.Error(key + ".type", "a Sequence inside a Sequence is not supported");
  }
  return errors.Error(key + ".type",
                      absl::StrCat("unsupported pre-tokenizer ", QuotedShort(type), " (supported: ",
                                   in_sequence ? "ByteLevel, Split" : "ByteLevel, Sequence", ")"));
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
      const std::string key = absl::StrCat("pre_tokenizer.pretokenizers[", i, "]");
      // A step after ByteLevel sees its byte-level alphabet (" " is "Ġ"), which titan skips.
      if (byte_level) {
        return errors.Error(key,
                            "a pre-tokenizer after the ByteLevel is not supported (supported: "
                            "Splits, then one ByteLevel, last)");
      }
      absl::StatusOr<BpeModel::PreTokenizeStep> step =
          ParsePreTokenizer((*list)[i], errors, key, /*in_sequence=*/true, &byte_level);
      if (!step.ok()) return step.status();
      model->pre_tokenizer.push_back(*std::move(step));
    }
  } else if (!spec.is_null()) {
    absl::StatusOr<BpeModel::PreTokenizeStep> step =
        ParsePreTokenizer(spec, errors, "pre_tokenizer", /*in_sequence=*/false, &byte_level);
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

// What Decode gives for `token`: with HF's ByteLevel decoder its bytes (a token with characters
// outside the alphabet stays its UTF-8), without it the token as written.
std::string DecodedBytes(const std::string& token, const BpeModel& model) {
  if (model.decoding != BpeModel::Decoding::kByteLevel) return token;
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
    SetIdBytes(id, DecodedBytes(token, *model), model);
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
      // tokenizers splits at every space and needs two parts: "a b c" and "a  b" are refused.
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return errors.Expected(key, "\"left right\" (one space)", merge);
      }
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

absl::Status ParseAddedTokens(const Json& root, const JsonErrors& errors, AddedTokenIds& ids,
                              BpeModel* model) {
  const Json list = root.value("added_tokens", Json::array());
  if (!list.is_array()) return errors.Expected("added_tokens", "an array", list);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string key = absl::StrCat("added_tokens[", i, "]");
    const Json id = list[i].is_object() ? list[i].value("id", Json()) : Json();
    if (!id.is_number_integer()) return errors.Expected(key + ".id", "an integer", id);
    absl::StatusOr<BpeModel::AddedToken> token =
        ParseAddedToken(list[i], id.get<int64_t>(), AddedTokenFields::kRequired, errors, key);
    if (!token.ok()) return token.status();
    if (absl::Status s = ids.Add(*std::move(token), errors, key, model); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// How tokenizers decodes with the tokenizer.json "decoder": a ByteLevel, alone or in a Sequence;
// none (token strings joined by spaces); an empty Sequence (token strings concatenated). Any other
// (Replace, Strip, ByteFallback, ...) is refused: titan's decoding would differ.
absl::StatusOr<BpeModel::Decoding> ParseDecoder(const Json& root, const JsonErrors& errors) {
  const auto decoder = root.find("decoder");
  if (decoder == root.end() || decoder->is_null()) return BpeModel::Decoding::kTokensSpaced;
  const auto check = [&](const Json& spec, const std::string& key, bool in_sequence) {
    if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
      return errors.Expected(key, "an object with a \"type\"", spec);
    }
    const std::string type = spec["type"].get<std::string>();
    if (type == "ByteLevel") {
      // Unused in decoding, but tokenizers refuses a ByteLevel without them.
      for (const char* field : {"add_prefix_space", "trim_offsets"}) {
        if (absl::StatusOr<bool> value = RequiredBool(spec, field, errors, key); !value.ok()) {
          return value.status();
        }
      }
      return absl::OkStatus();
    }
    if (!in_sequence && type == "Sequence") return absl::OkStatus();
    return errors.Error(key + ".type", absl::StrCat("unsupported decoder ", QuotedShort(type),
                                                    " (supported: ByteLevel",
                                                    in_sequence ? "" : ", or a Sequence of it",
                                                    "; another would change the decoded text)"));
  };
  if (absl::Status status = check(*decoder, "decoder", false); !status.ok()) return status;
  if ((*decoder)["type"] != "Sequence") return BpeModel::Decoding::kByteLevel;
  const auto list = decoder->find("decoders");
  if (list == decoder->end() || !list->is_array()) {
    return errors.Expected("decoder.decoders", "an array", list == decoder->end() ? Json() : *list);
  }
  for (size_t i = 0; i < list->size(); ++i) {
    if (absl::Status status = check((*list)[i], absl::StrCat("decoder.decoders[", i, "]"), true);
        !status.ok()) {
      return status;
    }
  }
  return list->empty() ? BpeModel::Decoding::kTokensConcatenated : BpeModel::Decoding::kByteLevel;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BuildFromJson(const Json& root,
                                                            const TokenSettings& settings,
                                                            const JsonErrors& errors) {
  const ConfigJson& config = settings.json;
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
  absl::StatusOr<BpeModel::Decoding> decoding = ParseDecoder(root, errors);
  if (!decoding.ok()) return decoding.status();
  model.decoding = *decoding;
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
    if (absl::Status s = ParseConfigAddedTokens(settings.added_tokens_decoder,
                                                settings.config_errors, added_ids, &model);
        !s.ok()) {
      return s;
    }
  }
  added_ids.LogRenumberedRest();
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
    SetIdBytes(token.id, DecodedBytes(token.content, model), &model);
  }

  absl::StatusOr<SpecialChoice> bos = ChooseSpecialToken(
      settings, "bos_token", {"<|begin_of_text|>", "<s>", "<bos>"}, model, vocab, errors.path());
  if (!bos.ok()) return bos.status();
  absl::StatusOr<SpecialChoice> eos = ChooseSpecialToken(
      settings, "eos_token", {"<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>"}, model, vocab,
      errors.path());
  if (!eos.ok()) return eos.status();
  // transformers' encode adds the post_processor's tokens where no tokenizer_config.json names
  // them.
  if (!settings.has_config) {
    absl::StatusOr<std::optional<TemplateTokens>> tokens = ReadPostProcessor(root, errors);
    if (!tokens.ok()) return tokens.status();
    if (tokens->has_value() && !config.contains("bos_token")) {
      if (absl::Status s = TakeTemplateToken((*tokens)->before, **tokens, "before $A",
                                             /*none_is_choice=*/true, model, vocab, errors, &*bos);
          !s.ok()) {
        return s;
      }
    }
    if (tokens->has_value() && !config.contains("eos_token")) {
      if (absl::Status s = TakeTemplateToken((*tokens)->after, **tokens, "after $A",
                                             /*none_is_choice=*/false, model, vocab, errors, &*eos);
          !s.ok()) {
        return s;
      }
    }
  }
  if (config.is_object()) {
    if (absl::Status s = AddConfigTokens(root, settings, vocab, errors.path(), added_ids, &model);
        !s.ok()) {
      return s;
    }
  }
  // Documents end with EOS and generation stops at it: a tokenizer without one is unusable.
  if (!eos->id.has_value()) {
    constexpr char kNeed[] = "titan needs an EOS: it ends documents and stops generation";
    if (config.is_object() && config.contains("eos_token")) {
      return settings.ErrorsFor("eos_token")
          .Error("eos_token",
                 absl::StrCat(config["eos_token"].is_null() ? "null" : "empty", ", but ", kNeed));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(settings.has_config ? settings.config_errors.path() : errors.path(),
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
                                                              const std::string& config_path,
                                                              const std::string& map_path) {
  absl::StatusOr<Json> root = ParseJsonFile<Json>(json_path);
  if (!root.ok()) return root.status();
  TokenSettings settings;
  if (!config_path.empty()) {
    absl::StatusOr<ConfigJson> parsed = ParseJsonFile<ConfigJson>(
        config_path, "added_tokens_decoder", &settings.added_tokens_decoder);
    if (!parsed.ok()) return parsed.status();
    settings.json = *std::move(parsed);
    settings.has_config = true;
    settings.config_errors = JsonErrors(config_path);
  }
  // transformers reads special_tokens_map.json only for a config without added_tokens_decoder.
  if (!map_path.empty() && !settings.json.contains("added_tokens_decoder")) {
    absl::StatusOr<ConfigJson> map = ParseJsonFile<ConfigJson>(map_path);
    if (!map.ok()) return map.status();
    settings.has_map = true;
    settings.map_errors = JsonErrors(map_path);
    if (absl::Status s = ApplySpecialTokensMap(*map, &settings); !s.ok()) return s;
  }
  // Typed accessors above check before reading; this catches what a malformed file could still trip.
  try {
    return BuildFromJson(*root, settings, JsonErrors(json_path));
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(json_path, ": malformed tokenizer: ", e.what()));
  }
}

}  // namespace titan
