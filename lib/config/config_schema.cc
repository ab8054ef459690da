#include "lib/config/config_schema.h"

#include <algorithm>
#include <set>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"
#include "lib/config/field_value.h"
#include "lib/config/job_config.pb.h"

namespace titan {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;

std::string CanonicalName(const KeyRef& ref) {
  return absl::StrCat(ref.section->name(), ".", ref.field->name());
}

bool IsConfigFileKey(const KeyRef& ref) {
  return ref.section->number() == JobConfig::kJobFieldNumber &&
         ref.field->number() == JobConfig::Job::kConfigFileFieldNumber;
}

const Schema& Schema::Get() {
  static const Schema* const schema = new Schema();
  return *schema;
}

const KeyRef* Schema::Find(absl::string_view section, absl::string_view key) const {
  auto it = keys_.find(absl::StrCat(section, ".", key));
  return it == keys_.end() ? nullptr : &it->second;
}

std::string Schema::SectionsUnder(absl::string_view prefix) const {
  std::vector<std::string> names;
  for (const auto& [alias, section] : section_aliases_) {
    if (absl::StartsWith(alias, absl::StrCat(prefix, "."))) {
      names.push_back(absl::StrCat("[", alias, "]"));
    }
  }
  std::sort(names.begin(), names.end());
  return absl::StrJoin(names, ", ");
}

std::string Schema::SectionNamed(absl::string_view section) const {
  auto it = section_aliases_.find(section);
  return it == section_aliases_.end() ? std::string(section) : it->second;
}

std::vector<std::string> Schema::KeyNames(absl::string_view section) const {
  auto it = keys_by_section_.find(SectionNamed(section));
  return it == keys_by_section_.end() ? std::vector<std::string>() : it->second;
}

std::optional<std::string> Schema::KeyElsewhere(absl::string_view section,
                                                absl::string_view key) const {
  std::set<std::string> found;
  for (const std::string& other : sections_) {
    if (SectionNamed(other) == SectionNamed(section)) continue;
    if ((SectionNamed(other) == "rl") != (SectionNamed(section) == "rl")) continue;
    if (const KeyRef* ref = Find(other, key)) found.insert(CanonicalName(*ref));
  }
  if (found.size() != 1) return std::nullopt;
  return *found.begin();
}

std::string Schema::SuggestKey(absl::string_view section, absl::string_view key,
                               bool as_flag) const {
  const std::string own_prefix = as_flag ? absl::StrCat("--", section, ".") : "";
  const std::vector<std::string> own_keys = KeyNames(section);
  if (const std::optional<std::string> elsewhere = KeyElsewhere(section, key)) {
    const std::vector<std::string> parts = absl::StrSplit(*elsewhere, '.');
    if (absl::EndsWith(parts[1], key) && absl::c_linear_search(own_keys, parts[1])) {
      return DidYouMean(parts[1], own_prefix);
    }
    return DidYouMean(
        as_flag ? absl::StrCat("--", *elsewhere) : absl::StrCat("[", parts[0], "] ", parts[1]), "");
  }
  return DidYouMean(Closest(key, own_keys), own_prefix);
}

std::vector<std::string> Schema::SectionNames() const {
  std::vector<std::string> names;
  for (const auto& [name, keys] : keys_by_section_) names.push_back(name);
  return names;
}

Schema::Schema() {
  const Descriptor* root = JobConfig::descriptor();
  for (int i = 0; i < root->field_count(); ++i) {
    const FieldDescriptor* section = root->field(i);
    CHECK(section->message_type() != nullptr && !section->is_repeated())
        << section->full_name() << ": every JobConfig field must be a section message";
    const Descriptor* section_type = section->message_type();
    const auto& section_aliases = section->options().GetRepeatedExtension(titan::section_alias);
    for (const std::string& alias : section_aliases) {
      CHECK(section_aliases_.emplace(alias, section->name()).second)
          << alias << " names two sections";
      for (size_t dot = alias.find('.'); dot != std::string::npos; dot = alias.find('.', dot + 1)) {
        section_prefixes_.insert(alias.substr(0, dot));
      }
    }
    for (int j = 0; j < section_type->field_count(); ++j) {
      const FieldDescriptor* field = section_type->field(j);
      CHECK(IsSupportedField(field)) << field->full_name() << ": unsupported type";
      const KeyRef ref{section, field};
      Add(section->name(), field->name(), ref);
      keys_by_section_[section->name()].push_back(field->name());
      for (const std::string& alias : field->options().GetRepeatedExtension(titan::alias)) {
        std::vector<std::string> parts = absl::StrSplit(alias, '.');
        CHECK_EQ(parts.size(), 2u)
            << field->full_name() << ": alias must be section.key: " << alias;
        Add(parts[0], parts[1], ref);
      }
      for (const std::string& alias : section_aliases) Add(alias, field->name(), ref);
    }
  }
  for (const std::string& prefix : section_prefixes_) {
    CHECK(!sections_.contains(prefix)) << prefix << " is a section and a dotted section's prefix";
  }
}

void Schema::Add(absl::string_view section, absl::string_view key, const KeyRef& ref) {
  CHECK(keys_.emplace(absl::StrCat(section, ".", key), ref).second)
      << section << "." << key << " is declared twice";
  sections_.insert(std::string(section));
}

}  // namespace titan
