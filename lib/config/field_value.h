#ifndef TITAN_LIB_CONFIG_FIELD_VALUE_H_
#define TITAN_LIB_CONFIG_FIELD_VALUE_H_

// One schema field's value, read from TOML or command-line text, written back as TOML, and checked
// against the bounds and choices the schema declares. Internal to lib/config (job_config.cc).

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_field.h"
#include "toml++/toml.h"

namespace titan {

// The value types a schema field may have.
enum class FieldKind { kInteger, kFloat, kBoolean, kString, kStringList };

FieldKind KindOf(const google::protobuf::FieldDescriptor* field);
bool IsSupportedField(const google::protobuf::FieldDescriptor* field);
// "integer", "list of strings", ... as errors and --help spell the kind.
const char* TypeName(FieldKind kind);

// "text" with C escapes: how errors quote what they found.
std::string Quote(absl::string_view text);
// "string \"x\"", "integer 3", "array", ...: what a TOML node holds, for errors.
std::string DescribeTomlNode(const toml::node& node);

void SetList(const std::vector<std::string>& items, const google::protobuf::FieldDescriptor* field,
             google::protobuf::Message* section);

// Errors say what was expected and what was found; the caller says where.
absl::Status SetFromToml(const toml::node& node, const google::protobuf::FieldDescriptor* field,
                         google::protobuf::Message* section);
// Command-line text: lists are comma-separated.
absl::Status SetFromText(const std::string& text, const google::protobuf::FieldDescriptor* field,
                         google::protobuf::Message* section);

// The TOML text of one field's value.
std::string TomlValue(const google::protobuf::Message& section,
                      const google::protobuf::FieldDescriptor* field);

// "\"a\", \"b\"".
std::string QuotedList(const google::protobuf::RepeatedPtrField<std::string>& items);
// "-1 or a value in [0, 1]", ">= 1", ...; empty when the field has no bounds.
std::string RangeText(const google::protobuf::FieldOptions& options);

// Bounds and choices declared in the schema; errors name "[section] key".
absl::Status CheckField(absl::string_view section, const google::protobuf::Message& message,
                        const google::protobuf::FieldDescriptor* field);

}  // namespace titan

#endif  // TITAN_LIB_CONFIG_FIELD_VALUE_H_
