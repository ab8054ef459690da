#include "lib/config/job_config.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "lib/config/config_schema.h"
#include "lib/config/field_value.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/short_text.h"
#include "toml++/toml.h"

namespace titan {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::Message;

// The most of an unknown section or key name an error quotes (the longest real one is 63 bytes).
constexpr size_t kNameQuoteBytes = 100;

// Where each key of the last parsed config was set ("x.toml:12" or "--section.key"), by canonical
// "section.key"; process-wide so errors raised far from the parser (model registry, optimizer) can
// still name the line.
class KeySources {
 public:
  static KeySources& Get() {
    static KeySources* const sources = new KeySources();
    return *sources;
  }

  void Reset(absl::flat_hash_map<std::string, std::string> sources) {
    absl::MutexLock lock(&mutex_);
    sources_ = std::move(sources);
  }

  std::optional<std::string> Find(const std::string& name) const {
    absl::MutexLock lock(&mutex_);
    auto it = sources_.find(name);
    return it == sources_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }

 private:
  mutable absl::Mutex mutex_;
  absl::flat_hash_map<std::string, std::string> sources_;
};

Message* MutableSection(const KeyRef& ref, JobConfig* config) {
  return config->GetReflection()->MutableMessage(config, ref.section);
}

// Refuses an old name and its new name (or two old names) for one key within one source.
class KeyWrites {
 public:
  // `written` is the key as the source spells it: "[job] print_freq" or "--job.print_freq".
  absl::Status Record(const KeyRef& ref, const std::string& written) {
    auto [it, inserted] = written_by_field_.emplace(ref.field, written);
    if (inserted || it->second == written) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(it->second, " and ", written,
                                                   " name the same key ", CanonicalName(ref),
                                                   "; set only one of them"));
  }

 private:
  absl::flat_hash_map<const FieldDescriptor*, std::string> written_by_field_;
};

void WarnAboutName(absl::string_view section, absl::string_view key, const KeyRef& ref,
                   absl::string_view source, absl::string_view written) {
  if (section != ref.section->name() &&
      Schema::Get().SectionNamed(section) == ref.section->name()) {
    LOG(WARNING) << source << ": " << written << " is torchtitan's name of " << CanonicalName(ref);
  } else if (section != ref.section->name() || key != ref.field->name()) {
    // Older torchtitan names and newer torchtitan homes ([debug] seed) alike: neither is wrong.
    LOG(WARNING) << source << ": " << written << " is read as " << CanonicalName(ref)
                 << ", titan's name for it";
  }
}

// The key's value_alias pairs applied: a string (or list item) spelled as another name is stored as
// the schema's, with a warning naming both.
void RenameAliasedValues(const KeyRef& ref, Message* section, absl::string_view source,
                         absl::string_view written) {
  const auto& aliases = ref.field->options().GetRepeatedExtension(titan::value_alias);
  if (aliases.empty()) return;
  const auto* reflection = section->GetReflection();
  const auto rename = [&](const std::string& value) -> std::optional<std::string> {
    for (const std::string& alias : aliases) {
      const std::vector<std::string> parts = absl::StrSplit(alias, absl::MaxSplits('=', 1));
      CHECK_EQ(parts.size(), 2u) << ref.field->full_name() << ": value_alias must be other=name";
      if (value != parts[0]) continue;
      LOG(WARNING) << source << ": " << written << ": \"" << parts[0]
                   << "\" is torchtitan's name of \"" << parts[1] << "\"";
      return parts[1];
    }
    return std::nullopt;
  };
  CHECK_EQ(ref.field->cpp_type(), FieldDescriptor::CPPTYPE_STRING)
      << ref.field->full_name() << ": value_alias on a key that is not a string";
  if (!ref.field->is_repeated()) {
    if (auto name = rename(reflection->GetString(*section, ref.field))) {
      reflection->SetString(section, ref.field, *std::move(name));
    }
    return;
  }
  for (int i = 0; i < reflection->FieldSize(*section, ref.field); ++i) {
    if (auto name = rename(reflection->GetRepeatedString(*section, ref.field, i))) {
      reflection->SetRepeatedString(section, ref.field, i, *std::move(name));
    }
  }
}

// "[rl] is titan_rl's section, which titan_train would ignore".
std::string UnreadSectionText(const UnreadSection& unread) {
  return absl::StrCat("[", unread.section, "] is ", unread.reader, "'s section, which ",
                      unread.tool, " would ignore");
}

// Refuses [`unread.section`] keys that differ from their defaults, naming the first; the section at
// its defaults passes (a run's config.toml holds every section).
absl::Status RefuseChangedUnreadKeys(const JobConfig& config, const UnreadSection& unread) {
  const std::vector<std::string> changed = ChangedKeys(config, unread.section);
  if (changed.empty()) return absl::OkStatus();
  return WithKeySource(absl::InvalidArgumentError(
      absl::StrCat(changed.front(), ": ", UnreadSectionText(unread),
                   "; leave it at its defaults or run ", unread.reader)));
}

// What follows an unknown `key` of `section` in its refusal: ": unknown key (did you mean ...?)",
// or, in a section the tool does not read (`unread`), that section's refusal instead: a key
// suggested there would be refused next.
std::string UnknownKeyText(absl::string_view section, absl::string_view key, bool as_flag,
                           const UnreadSection* unread) {
  const Schema& schema = Schema::Get();
  if (unread != nullptr && schema.SectionNamed(section) == unread->section) {
    return absl::StrCat(": ", UnreadSectionText(*unread), "; remove it or run ", unread->reader);
  }
  return absl::StrCat(": unknown key", schema.SuggestKey(section, key, as_flag));
}

// What follows an unknown top-level `section` in its refusal: ": unknown section (did you mean
// ...?)", not suggesting a section the tool does not read (`unread`), which it would refuse next.
std::string UnknownSectionText(absl::string_view section, const UnreadSection* unread) {
  const std::optional<std::string> closest = Closest(section, Schema::Get().SectionNames());
  if (unread != nullptr && closest == unread->section) {
    return absl::StrCat(": unknown section (the nearest, ", UnreadSectionText(*unread), ")");
  }
  return absl::StrCat(": unknown section", DidYouMean(closest, ""));
}

// Applies one parsed job file's tables to a config.
class TomlApplier {
 public:
  TomlApplier(absl::string_view source, JobConfig* config,
              absl::flat_hash_map<std::string, std::string>* sources, const UnreadSection* unread)
      : source_(source), config_(config), sources_(sources), unread_(unread) {}

  // The tables of `table`, whose name is `prefix` (empty: the file's top level). A dotted section
  // ([quantize.linear.float8]) is tables nested in TOML: the walk goes down to it.
  absl::Status ApplyTables(const toml::table& table, const std::string& prefix) {
    const Schema& schema = Schema::Get();
    for (const auto& [name_key, node] : table) {
      const std::string name(name_key.str());
      const std::string section = prefix.empty() ? name : absl::StrCat(prefix, ".", name);
      const toml::table* child = node.as_table();
      // For errors: an unknown name is quoted, however long it is.
      const std::string shown = ShortText(section, kNameQuoteBytes);
      if (child == nullptr) {
        if (prefix.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(At(node), ": ", shown, ": keys belong in a [section], got ",
                           DescribeTomlNode(node), " at the top level"));
        }
        return absl::InvalidArgumentError(absl::StrCat(
            At(node), ": [", prefix, "] ", ShortText(name, kNameQuoteBytes),
            ": unknown key; under [", prefix, "] titan reads only ", schema.SectionsUnder(prefix)));
      }
      if (schema.HasSection(section)) {
        if (absl::Status status = ApplySection(section, *child); !status.ok()) return status;
      } else if (schema.IsSectionPrefix(section)) {
        if (absl::Status status = ApplyTables(*child, section); !status.ok()) return status;
      } else if (prefix.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(At(node), ": [", shown, "]", UnknownSectionText(section, unread_)));
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(At(node), ": [", shown, "]: unknown section; under [", prefix,
                         "] titan reads only ", schema.SectionsUnder(prefix)));
      }
    }
    return absl::OkStatus();
  }

 private:
  // "file:line" of a node, so every error points at the line to fix.
  std::string At(const toml::node& node) const {
    return absl::StrCat(source_, ":", node.source().begin.line);
  }

  absl::Status ApplySection(const std::string& section, const toml::table& table) {
    const Schema& schema = Schema::Get();
    for (const auto& [key_name, node] : table) {
      const std::string key(key_name.str());
      const std::string written = absl::StrCat("[", ShortText(section, kNameQuoteBytes), "] ",
                                               ShortText(key, kNameQuoteBytes));
      const KeyRef* ref = schema.Find(section, key);
      if (ref == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            At(node), ": ", written, UnknownKeyText(section, key, /*as_flag=*/false, unread_)));
      }
      if (IsConfigFileKey(*ref)) {
        return absl::InvalidArgumentError(
            absl::StrCat(At(node), ": ", written,
                         ": set it on the command line (--job.config_file=FILE); a job file "
                         "cannot name another"));
      }
      if (absl::Status status = writes_.Record(*ref, written); !status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(At(node), ": ", status.message()));
      }
      Message* message = MutableSection(*ref, config_);
      if (absl::Status status = SetFromToml(node, ref->field, message, written); !status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(At(node), ": ", status.message()));
      }
      RenameAliasedValues(*ref, message, source_, written);
      // Ranges and choices here too, not only over the merged config, to name the line.
      if (absl::Status status = CheckField(absl::StrCat("[", section, "] "), *message, ref->field);
          !status.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(At(node), ": ", status.message()));
      }
      (*sources_)[CanonicalName(*ref)] = At(node);
      WarnAboutName(section, key, *ref, source_, written);
    }
    return absl::OkStatus();
  }

  const std::string source_;
  JobConfig* const config_;
  absl::flat_hash_map<std::string, std::string>* const sources_;
  const UnreadSection* const unread_;  // nullptr: the tool reads every section
  KeyWrites writes_;
};

absl::Status ApplyToml(absl::string_view text, absl::string_view source, JobConfig* config,
                       absl::flat_hash_map<std::string, std::string>* sources,
                       const UnreadSection* unread) {
  toml::table root;
  try {
    // absl::string_view is not std::string_view in Debian's abseil build.
    root = toml::parse(std::string_view(text.data(), text.size()), std::string(source));
  } catch (const toml::parse_error& error) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d:%d: %s", source, error.source().begin.line,
                        error.source().begin.column, std::string(error.description())));
  }
  return TomlApplier(source, config, sources, unread).ApplyTables(root, "");
}

// One command-line override, resolved to its key.
struct Override {
  const KeyRef* ref;
  std::string section;
  std::string key;
  std::string flag;  // As written, e.g. "--training.steps".
  std::string value;
};

absl::StatusOr<std::vector<Override>> ParseOverrides(const std::vector<std::string>& args,
                                                     const UnreadSection* unread) {
  const Schema& schema = Schema::Get();
  std::vector<Override> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (!absl::ConsumePrefix(&arg, "--")) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument ", Quote(args[i]), ": expected --section.key=value"));
    }
    const size_t equals = arg.find('=');
    const absl::string_view name = arg.substr(0, equals);
    // Cut short: an unknown name is quoted in the error, however long it is.
    const std::string flag = absl::StrCat("--", ShortText(name, kNameQuoteBytes));
    std::vector<std::string> parts = absl::StrSplit(name, absl::MaxSplits('.', 1));
    // A dotted section (--quantize.linear.float8.emulate): the key is after the last dot.
    if (const size_t dot = name.rfind('.');
        parts.size() == 2 && schema.IsSectionPrefix(parts[0]) && dot != absl::string_view::npos) {
      const std::string top = parts[0];
      parts = {std::string(name.substr(0, dot)), std::string(name.substr(dot + 1))};
      if (!schema.HasSection(parts[0])) {
        return absl::InvalidArgumentError(absl::StrCat(flag, ": unknown section [", parts[0],
                                                       "]; under [", top, "] titan reads only ",
                                                       schema.SectionsUnder(top)));
      }
    }
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": expected --section.key (see --help)"));
    }
    if (!schema.HasSection(parts[0])) {
      return absl::InvalidArgumentError(absl::StrCat(flag, UnknownSectionText(parts[0], unread)));
    }
    const KeyRef* ref = schema.Find(parts[0], parts[1]);
    if (ref == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, UnknownKeyText(parts[0], parts[1], /*as_flag=*/true, unread)));
    }
    std::string value;
    if (equals != absl::string_view::npos) {
      value = std::string(arg.substr(equals + 1));
    } else {
      const bool next_is_value = i + 1 < args.size() && !absl::StartsWith(args[i + 1], "--");
      bool unused;
      if (KindOf(ref->field) == FieldKind::kBoolean) {
        value = next_is_value && ParseBoolean(args[i + 1], &unused) ? args[++i] : "true";
      } else if (next_is_value) {
        value = args[++i];
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": missing value (", TypeName(KindOf(ref->field)), ")"));
      }
    }
    overrides.push_back({ref, parts[0], parts[1], flag, std::move(value)});
  }
  return overrides;
}

absl::Status ApplyOverrides(const std::vector<Override>& overrides, JobConfig* config,
                            absl::flat_hash_map<std::string, std::string>* sources) {
  KeyWrites writes;
  for (const Override& override : overrides) {
    if (absl::Status status = writes.Record(*override.ref, override.flag); !status.ok()) {
      return status;
    }
    Message* section = MutableSection(*override.ref, config);
    if (absl::Status status =
            SetFromText(override.value, override.ref->field, section, override.flag);
        !status.ok()) {
      return status;
    }
    RenameAliasedValues(*override.ref, section, "command line", override.flag);
    (*sources)[CanonicalName(*override.ref)] = override.flag;
    WarnAboutName(override.section, override.key, *override.ref, "command line", override.flag);
  }
  return absl::OkStatus();
}

}  // namespace

JobConfig DefaultJobConfig() {
  JobConfig config;
  const Descriptor* root = JobConfig::descriptor();
  for (int i = 0; i < root->field_count(); ++i) {
    const FieldDescriptor* section = root->field(i);
    for (int j = 0; j < section->message_type()->field_count(); ++j) {
      const FieldDescriptor* field = section->message_type()->field(j);
      const auto& items = field->options().GetRepeatedExtension(titan::list_default);
      if (items.empty()) continue;
      SetList({items.begin(), items.end()}, field, MutableSection({section, field}, &config));
    }
  }
  return config;
}

absl::Status CheckJobGiven(const std::vector<std::string>& args) {
  const bool sets_a_key = std::any_of(args.begin(), args.end(), [](const std::string& arg) {
    return absl::StartsWith(arg, "--") && !absl::StartsWith(arg, "--nproc_per_node");
  });
  if (sets_a_key) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "no job given: pass --job.config_file=FILE (configs/ has examples) and any --section.key "
      "overrides; --help lists the keys");
}

absl::StatusOr<JobConfig> LoadJobConfig(int argc, char** argv) {
  return ParseJobConfig("", std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
}

absl::StatusOr<JobConfig> ParseJobConfig(const std::string& toml_path,
                                         const std::vector<std::string>& overrides,
                                         const std::optional<UnreadSection>& unread) {
  const UnreadSection* const unread_section = unread.has_value() ? &*unread : nullptr;
  absl::StatusOr<std::vector<Override>> parsed = ParseOverrides(overrides, unread_section);
  if (!parsed.ok()) return parsed.status();
  std::string path = toml_path;
  std::string path_flag;  // the override that set `path`, as written
  for (const Override& override : *parsed) {
    if (!IsConfigFileKey(*override.ref)) continue;
    if (!toml_path.empty() && override.value != toml_path) {
      return absl::InvalidArgumentError(absl::StrCat(override.flag, "=", override.value,
                                                     ": the config file is already ", toml_path));
    }
    // Files are not layered: the last would replace the first's keys, unlike a repeated key's flag.
    if (!path_flag.empty() && override.value != path) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_flag, "=", path, " and ", override.flag, "=", override.value,
                       ": a job reads one job file; set the other's keys as --section.key flags"));
    }
    path = override.value;
    path_flag = override.flag;
  }
  JobConfig config = DefaultJobConfig();
  absl::flat_hash_map<std::string, std::string> sources;
  if (!path.empty()) {
    // An ifstream opens a directory and reads it as empty: the defaults would run unnoticed.
    if (IsDirectory(path)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": is a directory, expected a TOML file"));
    }
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) return text.status();
    if (absl::Status status = ApplyToml(*text, path, &config, &sources, unread_section);
        !status.ok()) {
      return status;
    }
  }
  if (absl::Status status = ApplyOverrides(*parsed, &config, &sources); !status.ok()) {
    return status;
  }
  if (!path.empty()) config.mutable_job()->set_config_file(path);
  KeySources::Get().Reset(std::move(sources));
  if (unread_section != nullptr) {
    if (absl::Status status = RefuseChangedUnreadKeys(config, *unread_section); !status.ok()) {
      return status;
    }
  }
  return config;
}

absl::StatusOr<JobConfig> ParseJobConfigText(absl::string_view toml_text,
                                             absl::string_view source_name,
                                             const std::vector<std::string>& overrides) {
  absl::StatusOr<std::vector<Override>> parsed = ParseOverrides(overrides, nullptr);
  if (!parsed.ok()) return parsed.status();
  JobConfig config = DefaultJobConfig();
  absl::flat_hash_map<std::string, std::string> sources;
  if (absl::Status status = ApplyToml(toml_text, source_name, &config, &sources, nullptr);
      !status.ok()) {
    return status;
  }
  if (absl::Status status = ApplyOverrides(*parsed, &config, &sources); !status.ok()) {
    return status;
  }
  KeySources::Get().Reset(std::move(sources));
  return config;
}

absl::Status WithKeySource(const absl::Status& status) {
  absl::string_view message = status.message();
  if (status.ok() || !absl::ConsumePrefix(&message, "[")) return status;
  const size_t close = message.find("] ");
  if (close == absl::string_view::npos) return status;
  const absl::string_view section = message.substr(0, close);
  const absl::string_view rest = message.substr(close + 2);
  // The key ends where its name does: "key:", "key=", "key ", "key[0].pattern".
  const size_t end = rest.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_");
  const KeyRef* ref = Schema::Get().Find(section, rest.substr(0, end));
  if (ref == nullptr) return status;
  const std::optional<std::string> source = KeySources::Get().Find(CanonicalName(*ref));
  if (!source.has_value()) return status;
  return absl::Status(status.code(), absl::StrCat(*source, ": ", status.message()));
}

std::optional<std::string> KeySource(absl::string_view section, absl::string_view key) {
  const KeyRef* ref = Schema::Get().Find(section, key);
  if (ref == nullptr) return std::nullopt;
  return KeySources::Get().Find(CanonicalName(*ref));
}

std::string UnderDumpFolder(const JobConfig& config, const std::string& folder) {
  return JoinPath(config.job().dump_folder(), folder);
}

std::string CriticCheckpointFolder(absl::string_view folder) {
  // "ck/", "ck/." and "ck/./" all name ck.
  while (folder.size() > 1 && (absl::ConsumeSuffix(&folder, "/") ||
                               (folder.size() > 2 && absl::ConsumeSuffix(&folder, "/.")))) {
  }
  return absl::StrCat(folder, "_critic");
}

}  // namespace titan
