#ifndef TITAN_LIB_CONFIG_FIELD_VALUE_H_
#define TITAN_LIB_CONFIG_FIELD_VALUE_H_

// One schema field's value, read from TOML or command-line text, written back as TOML, and checked
// against the bounds and choices the schema declares. Internal to lib/config (job_config.cc), but
// ParseInt32, which profile_run's own flags share.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_field.h"
#include "toml++/toml.h"

namespace titan {

// The value types a schema field may have. A list of tables is a repeated message whose fields are
// the tables' keys (scalars or lists, each optional: a table sets only the keys it names).
enum class FieldKind { kInteger, kFloat, kBoolean, kString, kStringList, kFloatList, kTableList };

FieldKind KindOf(const google::protobuf::FieldDescriptor* field);
bool IsSupportedField(const google::protobuf::FieldDescriptor* field);
// "integer", "list of strings", ... as errors and --help spell the kind.
const char* TypeName(FieldKind kind);

// "text" with C escapes: how errors quote what they found.
std::string Quote(absl::string_view text);
// "string \"x\"", "integer 3", "array", ...: what a TOML node holds, for errors.
std::string DescribeTomlNode(const toml::node& node);

// The one candidate that `name` (4 characters or more) begins, a name cut short (local_batch,
// compi), else the candidate closest to `name` when it is close enough to be a likely typo.
std::optional<std::string> Closest(absl::string_view name,
                                   const std::vector<std::string>& candidates);
// " (did you mean \"<prefix><suggestion>\"?)", or "" without a suggestion.
std::string DidYouMean(const std::optional<std::string>& suggestion, absl::string_view prefix);

// A command-line boolean: true or false, exactly as TOML spells them (no True, 1, yes or on).
bool ParseBoolean(absl::string_view text, bool* value);

// A command-line 32-bit integer; `where` (a flag or key) names it in the error, which says
// "expected integer" or, past int32's range, "expected 32-bit integer".
absl::StatusOr<int32_t> ParseInt32(absl::string_view text, absl::string_view where);

void SetList(const std::vector<std::string>& items, const google::protobuf::FieldDescriptor* field,
             google::protobuf::Message* message);

// Sets `field` of `message`. `where` names the key as the source spells it ("[optimizer] lr",
// "--optimizer.lr") and starts every error, which then says what was expected and what was found;
// keys inside a list of tables are named "<where>[i].<key>".
absl::Status SetFromToml(const toml::node& node, const google::protobuf::FieldDescriptor* field,
                         google::protobuf::Message* message, absl::string_view where);
// Command-line text: lists of strings are comma-separated, other lists are TOML inline values.
absl::Status SetFromText(const std::string& text, const google::protobuf::FieldDescriptor* field,
                         google::protobuf::Message* message, absl::string_view where);

// The TOML text of one field's value (a list of tables as inline tables, one line).
std::string TomlValue(const google::protobuf::Message& message,
                      const google::protobuf::FieldDescriptor* field);

// "\"a\", \"b\"".
std::string QuotedList(const google::protobuf::RepeatedPtrField<std::string>& items);
// "-1 or a value in [0, 1]", ">= 1", ">= 0 and a finite value representable as float32 (...)", ...;
// empty when the field has no bounds.
std::string RangeText(const google::protobuf::FieldOptions& options);

// The fewest digits that read back as the same double (0.9999999, not 1).
std::string FormatNumber(double value);

// Bounds and choices declared in the schema, for the keys a list's tables set too. Errors name the
// key as `prefix` + name ("[optimizer] lr", "[optimizer] param_groups[0].lr").
absl::Status CheckField(absl::string_view prefix, const google::protobuf::Message& message,
                        const google::protobuf::FieldDescriptor* field);

}  // namespace titan

#endif  // TITAN_LIB_CONFIG_FIELD_VALUE_H_
