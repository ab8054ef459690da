#include "lib/tokenizer/added_tokens.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "lib/util/short_text.h"

namespace titan {

absl::Status JsonErrors::Error(const std::string& key, const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(path_, ": ", key, ": ", what));
}

absl::Status JsonErrors::Expected(const std::string& key, const std::string& expected,
                                  const Json& got) const {
  // JsonForMessage names a structure's type itself.
  const std::string type = got.is_structured() ? "" : absl::StrCat(got.type_name(), " ");
  return Error(key, absl::StrCat("expected ", expected, ", got ", type, JsonForMessage(got)));
}

absl::StatusOr<bool> OptionalBool(const Json& object, const char* field, bool fallback,
                                  const JsonErrors& errors, const std::string& key) {
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return errors.Expected(absl::StrCat(key, ".", field), "a boolean", *it);
  return it->get<bool>();
}

absl::StatusOr<bool> RequiredBool(const Json& object, const char* field, const JsonErrors& errors,
                                  const std::string& key) {
  const auto it = object.find(field);
  if (it == object.end()) {
    return errors.Error(absl::StrCat(key, ".", field), "missing (tokenizers requires it)");
  }
  if (!it->is_boolean()) return errors.Expected(absl::StrCat(key, ".", field), "a boolean", *it);
  return it->get<bool>();
}

absl::StatusOr<BpeModel::AddedToken> ParseAddedToken(const Json& spec, int64_t id,
                                                     AddedTokenFields fields,
                                                     const JsonErrors& errors,
                                                     const std::string& key) {
  if (!spec.is_object() || !spec.contains("content") || !spec["content"].is_string()) {
    return errors.Expected(key, "an object with a string \"content\"", spec);
  }
  if (id < 0 || id > INT32_MAX) return errors.Error(key + ".id", absl::StrCat("bad id ", id));
  BpeModel::AddedToken token;
  token.content = spec["content"].get<std::string>();
  token.id = static_cast<int32_t>(id);
  if (token.content.empty()) return errors.Error(key + ".content", "empty");
  const auto field = [&](const char* name, bool fallback) {
    return fields == AddedTokenFields::kRequired ? RequiredBool(spec, name, errors, key)
                                                 : OptionalBool(spec, name, fallback, errors, key);
  };
  absl::StatusOr<bool> single_word = field("single_word", false);
  if (!single_word.ok()) return single_word.status();
  if (*single_word) return errors.Error(key + ".single_word", "true is not supported");
  for (auto [name, out] :
       {std::pair{"lstrip", &token.lstrip}, std::pair{"rstrip", &token.rstrip}}) {
    absl::StatusOr<bool> value = field(name, false);
    if (!value.ok()) return value.status();
    *out = *value;
  }
  // HF's default for a token without the field is normalized unless special.
  absl::StatusOr<bool> special = field("special", false);
  if (!special.ok()) return special.status();
  absl::StatusOr<bool> normalized = field("normalized", !*special);
  if (!normalized.ok()) return normalized.status();
  token.normalized = *normalized;
  token.special = *special;
  return token;
}

namespace {

// Renumbered added tokens logged one by one; the rest are counted.
constexpr int64_t kRenumberedLogged = 3;

// The settings of an added token listed again (see AddedTokenIds::Add).
void ListAgain(const BpeModel::AddedToken& later, BpeModel::AddedToken& listed) {
  listed.lstrip = later.lstrip;
  listed.rstrip = later.rstrip;
  listed.normalized = later.normalized;
  listed.special = listed.special || later.special;
}

}  // namespace

absl::Status AddedTokenIds::Assign(BpeModel::AddedToken& token, const JsonErrors& errors,
                                   const std::string& key) {
  const int32_t declared = token.id;
  const auto in_vocab = vocab_.find(token.content);
  if (in_vocab != vocab_.end()) {
    token.id = in_vocab->second;
  } else {
    if (next_id_ > INT32_MAX) return errors.Error(key, "no id left below 2^31");
    token.id = static_cast<int32_t>(next_id_);
  }
  next_id_ = std::max<int64_t>(next_id_, int64_t{token.id} + 1);
  if (token.id != declared && ++renumbered_ <= kRenumberedLogged) {
    LOG(WARNING) << errors.path() << ": " << key << " " << QuotedShort(token.content) << " has id "
                 << token.id << " (as transformers and tokenizers give it: "
                 << (in_vocab != vocab_.end() ? "model.vocab's id" : "the next free id")
                 << "), not " << declared;
  }
  return absl::OkStatus();
}

void AddedTokenIds::LogRenumberedRest() const {
  LOG_IF(WARNING, renumbered_ > kRenumberedLogged)
      << "... and " << renumbered_ - kRenumberedLogged
      << " more added tokens have other ids than written (" << renumbered_ << " in all)";
}

absl::Status AddedTokenIds::Add(BpeModel::AddedToken token, const JsonErrors& errors,
                                const std::string& key, BpeModel* model) {
  if (const auto listed = position_.find(token.content); listed != position_.end()) {
    ListAgain(token, model->added_tokens[listed->second]);
    return absl::OkStatus();
  }
  if (absl::Status status = Assign(token, errors, key); !status.ok()) return status;
  position_.emplace(token.content, model->added_tokens.size());
  model->added_tokens.push_back(std::move(token));
  return absl::OkStatus();
}

std::optional<int32_t> TokenId(const std::string& name, const BpeModel& model,
                               const absl::flat_hash_map<std::string, int32_t>& vocab) {
  for (const BpeModel::AddedToken& token : model.added_tokens) {
    if (token.content == name) return token.id;
  }
  const auto it = vocab.find(name);
  if (it != vocab.end()) return it->second;
  return std::nullopt;
}

}  // namespace titan
