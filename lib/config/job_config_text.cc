#include "lib/config/job_config.h"

// The job config as text: its help, its TOML dump, and what changed against defaults or an
// earlier dump.

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "glog/logging.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "lib/config/config_schema.h"
#include "lib/config/field_value.h"
#include "lib/util/redact.h"

namespace titan {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::FieldOptions;
using ::google::protobuf::Message;

// A key's help, choices, range and old names, one per line after `indent`.
void AppendKeyDetails(const FieldDescriptor* field, absl::string_view indent, std::string* help) {
  const FieldOptions& options = field->options();
  absl::StrAppend(help, indent, options.GetExtension(titan::help), "\n");
  if (options.ExtensionSize(titan::choices) > 0) {
    absl::StrAppend(help, indent,
                    "one of: ", QuotedList(options.GetRepeatedExtension(titan::choices)), "\n");
  }
  if (const std::string range = RangeText(options); !range.empty()) {
    absl::StrAppend(help, indent, "range: ", range, "\n");
  }
  if (const std::string& reason = options.GetExtension(titan::unsupported); !reason.empty()) {
    absl::StrAppend(help, indent, "refused unless left at its default: ", reason, "\n");
  }
  for (const std::string& alias : options.GetRepeatedExtension(titan::alias)) {
    const std::vector<std::string> parts = absl::StrSplit(alias, '.');
    absl::StrAppend(help, indent, "old name: --", alias, " ([", parts[0], "] ", parts[1], ")\n");
  }
  for (const std::string& alias : options.GetRepeatedExtension(titan::value_alias)) {
    const std::vector<std::string> parts = absl::StrSplit(alias, absl::MaxSplits('=', 1));
    absl::StrAppend(help, indent, "also: \"", parts[0], "\" for \"", parts[1], "\"\n");
  }
}

// JobConfigToToml's "key = value" lines by "[section] key", in order; comments left out.
std::vector<std::pair<std::string, std::string>> TomlKeyLines(absl::string_view toml) {
  std::vector<std::pair<std::string, std::string>> lines;
  absl::string_view section;
  for (absl::string_view line : absl::StrSplit(toml, '\n')) {
    if (absl::StartsWith(line, "[")) {
      section = line;
      continue;
    }
    const size_t equals = line.find(" = ");
    if (line.empty() || line[0] == '#' || equals == absl::string_view::npos) continue;
    lines.emplace_back(absl::StrCat(section, " ", line.substr(0, equals)),
                       std::string(line.substr(equals + 3)));
  }
  return lines;
}

}  // namespace

std::string JobConfigHelp() {
  std::string help =
      "Job configuration: a TOML job file (--job.config_file=FILE) with the [section] tables "
      "below,\nthen --section.key=value (or --section.key value) overrides, later ones winning. "
      "On the command\nline lists of strings are comma-separated (a,b) or TOML arrays ('[\"a\", "
      "\"b\"]'), other lists are\nTOML inline values ('[{key = 1}]'), and a bare --section.key "
      "sets a boolean to true.\n";
  const JobConfig defaults = DefaultJobConfig();
  const Descriptor* root = JobConfig::descriptor();
  for (int i = 0; i < root->field_count(); ++i) {
    const FieldDescriptor* section = root->field(i);
    const Message& section_defaults = defaults.GetReflection()->GetMessage(defaults, section);
    absl::StrAppend(&help, "\n[", section->name(), "]  ",
                    section->options().GetExtension(titan::help), "\n");
    for (const std::string& alias : section->options().GetRepeatedExtension(titan::section_alias)) {
      absl::StrAppend(&help, "  also read as [", alias, "] (--", alias,
                      ".KEY), its keys named as here\n");
    }
    for (int j = 0; j < section->message_type()->field_count(); ++j) {
      const FieldDescriptor* field = section->message_type()->field(j);
      absl::StrAppend(&help, "  --", section->name(), ".", field->name(), "  (",
                      TypeName(KindOf(field)), ", default ", TomlValue(section_defaults, field),
                      ")\n");
      AppendKeyDetails(field, "      ", &help);
      if (KindOf(field) != FieldKind::kTableList) continue;
      absl::StrAppend(&help, "      keys of each table:\n");
      const Descriptor* table = field->message_type();
      for (int k = 0; k < table->field_count(); ++k) {
        absl::StrAppend(&help, "        ", table->field(k)->name(), "  (",
                        TypeName(KindOf(table->field(k))), ")\n");
        AppendKeyDetails(table->field(k), "            ", &help);
      }
    }
  }
  return help;
}

std::vector<std::string> ChangedKeys(const JobConfig& config, absl::string_view section) {
  const FieldDescriptor* field = JobConfig::descriptor()->FindFieldByName(std::string(section));
  CHECK(field != nullptr) << "no section " << section;
  const JobConfig defaults = DefaultJobConfig();
  const Message& message = config.GetReflection()->GetMessage(config, field);
  const Message& section_defaults = defaults.GetReflection()->GetMessage(defaults, field);
  std::vector<std::string> changed;
  for (int i = 0; i < field->message_type()->field_count(); ++i) {
    const FieldDescriptor* key = field->message_type()->field(i);
    const std::string value = TomlValue(message, key);
    if (value != TomlValue(section_defaults, key)) {
      changed.push_back(absl::StrCat("[", section, "] ", key->name(), " = ", value));
    }
  }
  return changed;
}

std::optional<std::string> ChangedKey(const JobConfig& config, absl::string_view section,
                                      absl::string_view key) {
  const std::string prefix = absl::StrCat("[", section, "] ", key, " = ");
  for (const std::string& changed : ChangedKeys(config, section)) {
    if (absl::StartsWith(changed, prefix)) return changed;
  }
  return std::nullopt;
}

std::vector<std::string> KeysChangedSince(absl::string_view earlier_toml, const JobConfig& config) {
  // Both texts are JobConfigToToml's: one line per key, so lines compare as values do.
  absl::flat_hash_map<std::string, std::string> earlier;
  for (auto& [key, value] : TomlKeyLines(earlier_toml)) earlier[key] = std::move(value);
  std::vector<std::string> changed;
  for (const auto& [key, value] : TomlKeyLines(JobConfigToToml(config))) {
    auto it = earlier.find(key);
    if (it != earlier.end() && it->second != value) {
      // A scorer's command may carry credentials: never printed.
      changed.push_back(
          absl::StrCat(key, " = ", RedactSecretsIn(it->second), " -> ", RedactSecretsIn(value)));
    }
  }
  return changed;
}

std::string JobConfigToToml(const JobConfig& config) {
  std::string toml;
  const Descriptor* root = JobConfig::descriptor();
  for (int i = 0; i < root->field_count(); ++i) {
    const FieldDescriptor* section = root->field(i);
    const Message& message = config.GetReflection()->GetMessage(config, section);
    absl::StrAppend(&toml, i == 0 ? "" : "\n", "[", section->name(), "]\n");
    for (int j = 0; j < section->message_type()->field_count(); ++j) {
      const FieldDescriptor* field = section->message_type()->field(j);
      // A comment: a job file may not set it, and the dump must run again as one.
      const char* prefix = IsConfigFileKey({section, field}) ? "# " : "";
      absl::StrAppend(&toml, prefix, field->name(), " = ", TomlValue(message, field), "\n");
    }
  }
  return toml;
}

std::string JobConfigToPrintedToml(const JobConfig& config) {
  return RedactSecretsIn(JobConfigToToml(config));
}

}  // namespace titan
