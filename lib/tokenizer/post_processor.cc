#include "lib/tokenizer/post_processor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"
#include "lib/util/short_text.h"

namespace titan {
namespace {

// TemplateProcessing's "single": {"SpecialToken": {"id": ...}} and {"Sequence": {"id": "A"}}
// pieces.
absl::StatusOr<TemplateTokens> ReadTemplate(const Json& spec, const JsonErrors& errors,
                                            const std::string& key) {
  TemplateTokens tokens{"post_processor TemplateProcessing", {}, {}};
  const auto single = spec.find("single");
  if (single == spec.end() || !single->is_array()) {
    return errors.Expected(key + ".single", "an array", single == spec.end() ? Json() : *single);
  }
  bool seen_text = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& piece = (*single)[i];
    const std::string piece_key = absl::StrCat(key, ".single[", i, "]");
    if (piece.is_object() && piece.contains("Sequence")) {
      seen_text = true;
      continue;
    }
    const Json token = piece.is_object() ? piece.value("SpecialToken", Json()) : Json();
    if (!token.is_object() || !token.contains("id") || !token["id"].is_string()) {
      return errors.Expected(piece_key,
                             "{\"SpecialToken\": {\"id\": \"...\"}} or {\"Sequence\": ...}", piece);
    }
    (seen_text ? tokens.after : tokens.before).push_back(token["id"].get<std::string>());
  }
  return tokens;
}

// RobertaProcessing's and BertProcessing's "cls" and "sep": [token, id].
absl::StatusOr<TemplateTokens> ReadClsSep(const Json& spec, const std::string& type,
                                          const JsonErrors& errors, const std::string& key) {
  TemplateTokens tokens{absl::StrCat("post_processor ", type), {}, {}};
  for (const auto& [field, out] :
       {std::pair{"cls", &tokens.before}, std::pair{"sep", &tokens.after}}) {
    const Json value = spec.value(field, Json());
    if (!value.is_array() || value.size() != 2 || !value[0].is_string()) {
      return errors.Expected(absl::StrCat(key, ".", field), "[\"token\", id]", value);
    }
    out->push_back(value[0].get<std::string>());
  }
  return tokens;
}

// One processor; nullopt: it adds no tokens, or is unknown (warned about).
absl::StatusOr<std::optional<TemplateTokens>> ReadProcessor(const Json& spec,
                                                            const JsonErrors& errors,
                                                            const std::string& key) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    return errors.Expected(key, "an object with a \"type\"", spec);
  }
  const std::string type = spec["type"].get<std::string>();
  if (type == "TemplateProcessing") return ReadTemplate(spec, errors, key);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    return ReadClsSep(spec, type, errors, key);
  }
  if (type == "Sequence") {
    const Json list = spec.value("processors", Json());
    if (!list.is_array()) return errors.Expected(key + ".processors", "an array", list);
    for (size_t i = 0; i < list.size(); ++i) {
      absl::StatusOr<std::optional<TemplateTokens>> tokens =
          ReadProcessor(list[i], errors, absl::StrCat(key, ".processors[", i, "]"));
      if (!tokens.ok() || tokens->has_value()) return tokens;
    }
    return std::nullopt;
  }
  LOG_IF(WARNING, type != "ByteLevel")
      << errors.path() << ": " << key << ": post-processor " << QuotedShort(type)
      << " is unknown to titan: the BOS and EOS it may add are not read from it";
  return std::nullopt;
}

}  // namespace

absl::StatusOr<std::optional<TemplateTokens>> ReadPostProcessor(const Json& root,
                                                                const JsonErrors& errors) {
  const auto spec = root.find("post_processor");
  if (spec == root.end() || spec->is_null()) return std::nullopt;
  return ReadProcessor(*spec, errors, "post_processor");
}

absl::Status TakeTemplateToken(const std::vector<std::string>& names, const TemplateTokens& tokens,
                               const char* where, bool none_is_choice, const BpeModel& model,
                               const absl::flat_hash_map<std::string, int32_t>& vocab,
                               const JsonErrors& errors, SpecialChoice* choice) {
  if (names.size() > 1) {
    LOG(WARNING) << errors.path() << ": " << tokens.source << " adds " << names.size() << " tokens "
                 << where << " (" << absl::StrJoin(names, ", ") << "); titan adds one: keeps "
                 << Describe(*choice);
    return absl::OkStatus();
  }
  const std::string why = absl::StrCat("no tokenizer_config.json; ", tokens.source);
  if (names.empty()) {
    if (none_is_choice) *choice = {std::nullopt, "", absl::StrCat(why, " adds none ", where)};
    return absl::OkStatus();
  }
  const std::optional<int32_t> id = TokenId(names[0], model, vocab);
  if (!id.has_value()) {
    return errors.Error("post_processor", absl::StrCat(QuotedShort(names[0]), " (", where,
                                                       ") is neither an added token nor in "
                                                       "model.vocab"));
  }
  *choice = {id, names[0], absl::StrCat(why, " adds it ", where)};
  return absl::OkStatus();
}

}  // namespace titan
