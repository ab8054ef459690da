#ifndef TITAN_LIB_CONFIG_CONFIG_SCHEMA_H_
#define TITAN_LIB_CONFIG_CONFIG_SCHEMA_H_

// The job config's keys by name, read once from JobConfig's descriptor: what the parser and the
// help resolve names through. Private to //lib/config:job_config.

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"

namespace titan {

// Where a key lives: the JobConfig field holding its section, and the field in that section.
struct KeyRef {
  const google::protobuf::FieldDescriptor* section;
  const google::protobuf::FieldDescriptor* field;
};

// "section.key" in the schema's own names.
std::string CanonicalName(const KeyRef& ref);

// [job] config_file names the file being read, so only the command line sets it.
bool IsConfigFileKey(const KeyRef& ref);

// Every accepted "section.key", old names included.
class Schema {
 public:
  static const Schema& Get();

  // nullptr when the key is unknown.
  const KeyRef* Find(absl::string_view section, absl::string_view key) const;

  bool HasSection(absl::string_view section) const { return sections_.contains(section); }

  // Whether `name` is the first part of a dotted section name ("quantize", "quantize.linear" of
  // [quantize.linear.float8]) without being a section itself.
  bool IsSectionPrefix(absl::string_view name) const { return section_prefixes_.contains(name); }

  // The dotted sections under `prefix`, "[a.b.c]" each, for an error about the prefix.
  std::string SectionsUnder(absl::string_view prefix) const;

  // The section `section` names: itself, or the section it is another name of.
  std::string SectionNamed(absl::string_view section) const;

  // The current names of `section`'s keys (none where only old names live): candidates for "did
  // you mean", which should not teach an old name. A section's other name has its keys' names.
  std::vector<std::string> KeyNames(absl::string_view section) const;

  // The one other section holding `key` (an old name too: a torchtitan key that moved), as its
  // current "section.key"; nullopt where none or several do. Not across [rl]'s border: titan_rl
  // reads its own keys (learning_rate) where titan_train reads others ([optimizer] lr).
  std::optional<std::string> KeyElsewhere(absl::string_view section, absl::string_view key) const;

  // " (did you mean ...?)" for an unknown `key` of `section`: the same name in another section
  // first (an exact name is the stronger hint) unless it is a shortened old name of a key that
  // `section` has too ([validation] batch_size: its own local_batch_size, not [training]'s; but
  // [validation] enable_checkpoint: [checkpoint] enable), else the closest name in `section`.
  // Flags (`as_flag`) spell it "--section.key", job files "[section] key".
  std::string SuggestKey(absl::string_view section, absl::string_view key, bool as_flag) const;

  std::vector<std::string> SectionNames() const;

 private:
  Schema();

  // Registers `section.key` (a current or an old name) for `ref`.
  void Add(absl::string_view section, absl::string_view key, const KeyRef& ref);

  absl::flat_hash_map<std::string, KeyRef> keys_;
  absl::flat_hash_set<std::string> sections_;                      // old names' sections too
  absl::flat_hash_map<std::string, std::string> section_aliases_;  // other name -> section
  absl::flat_hash_set<std::string> section_prefixes_;
  absl::flat_hash_map<std::string, std::vector<std::string>> keys_by_section_;  // current names
};

}  // namespace titan

#endif  // TITAN_LIB_CONFIG_CONFIG_SCHEMA_H_
