#include "lib/config/field_value.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/config/job_config.pb.h"

namespace titan {

using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::FieldOptions;
using ::google::protobuf::Message;
using ::google::protobuf::Reflection;

namespace {

// Shortest text that reads back as the same double.
std::string FormatNumber(double value) {
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

// A TOML float needs a '.' or an exponent ("inf" and "nan" have neither and need none).
std::string TomlFloat(double value) {
  std::string text = FormatNumber(value);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::string TomlString(const std::string& value) {
  std::ostringstream out;
  out << toml::toml_formatter{toml::value<std::string>(value), toml::format_flags::none};
  return out.str();
}

absl::Status TypeError(const FieldDescriptor* field, absl::string_view got) {
  return absl::InvalidArgumentError(
      absl::StrCat("expected ", TypeName(KindOf(field)), ", got ", got));
}

absl::Status SetInteger(int64_t value, absl::string_view got, const FieldDescriptor* field,
                        Message* section) {
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("expected 32-bit integer, got ", got));
  }
  section->GetReflection()->SetInt32(section, field, static_cast<int32_t>(value));
  return absl::OkStatus();
}

absl::Status CheckChoice(absl::string_view section, const FieldDescriptor* field,
                         const std::string& value) {
  const auto& choices = field->options().GetRepeatedExtension(titan::choices);
  if (choices.empty() || std::find(choices.begin(), choices.end(), value) != choices.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("[", section, "] ", field->name(), "=",
                                                 Quote(value), ": expected one of ",
                                                 QuotedList(choices)));
}

}  // namespace

FieldKind KindOf(const FieldDescriptor* field) {
  if (field->is_repeated()) return FieldKind::kStringList;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return FieldKind::kInteger;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return FieldKind::kFloat;
    case FieldDescriptor::CPPTYPE_BOOL:
      return FieldKind::kBoolean;
    default:
      return FieldKind::kString;
  }
}

bool IsSupportedField(const FieldDescriptor* field) {
  if (field->is_repeated()) return field->cpp_type() == FieldDescriptor::CPPTYPE_STRING;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_BOOL:
    case FieldDescriptor::CPPTYPE_STRING:
      return true;
    default:
      return false;
  }
}

const char* TypeName(FieldKind kind) {
  switch (kind) {
    case FieldKind::kInteger:
      return "integer";
    case FieldKind::kFloat:
      return "float";
    case FieldKind::kBoolean:
      return "boolean";
    case FieldKind::kString:
      return "string";
    case FieldKind::kStringList:
      return "list of strings";
  }
  return "";
}

std::string Quote(absl::string_view text) { return absl::StrCat("\"", absl::CEscape(text), "\""); }

std::string DescribeTomlNode(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return absl::StrCat("string ", Quote(node.as_string()->get()));
    case toml::node_type::integer:
      return absl::StrCat("integer ", node.as_integer()->get());
    case toml::node_type::floating_point:
      return absl::StrCat("float ", FormatNumber(node.as_floating_point()->get()));
    case toml::node_type::boolean:
      return absl::StrCat("boolean ", node.as_boolean()->get() ? "true" : "false");
    case toml::node_type::array:
      return "array";
    case toml::node_type::table:
      return "table";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

void SetList(const std::vector<std::string>& items, const FieldDescriptor* field,
             Message* section) {
  const Reflection* reflection = section->GetReflection();
  reflection->ClearField(section, field);
  for (const std::string& item : items) reflection->AddString(section, field, item);
}

absl::Status SetFromToml(const toml::node& node, const FieldDescriptor* field, Message* section) {
  const Reflection* reflection = section->GetReflection();
  switch (KindOf(field)) {
    case FieldKind::kInteger:
      if (const auto* value = node.as_integer()) {
        return SetInteger(value->get(), DescribeTomlNode(node), field, section);
      }
      break;
    case FieldKind::kFloat:
      if (const auto* value = node.as_floating_point()) {
        reflection->SetDouble(section, field, value->get());
        return absl::OkStatus();
      }
      if (const auto* value = node.as_integer()) {
        reflection->SetDouble(section, field, static_cast<double>(value->get()));
        return absl::OkStatus();
      }
      break;
    case FieldKind::kBoolean:
      if (const auto* value = node.as_boolean()) {
        reflection->SetBool(section, field, value->get());
        return absl::OkStatus();
      }
      break;
    case FieldKind::kString:
      if (const auto* value = node.as_string()) {
        reflection->SetString(section, field, value->get());
        return absl::OkStatus();
      }
      break;
    case FieldKind::kStringList:
      if (const toml::array* array = node.as_array()) {
        std::vector<std::string> items;
        for (const toml::node& item : *array) {
          const auto* text = item.as_string();
          if (text == nullptr) {
            return absl::InvalidArgumentError(absl::StrCat(
                "expected list of strings, got array containing ", DescribeTomlNode(item)));
          }
          items.push_back(text->get());
        }
        SetList(items, field, section);
        return absl::OkStatus();
      }
      break;
  }
  return TypeError(field, DescribeTomlNode(node));
}

absl::Status SetFromText(const std::string& text, const FieldDescriptor* field, Message* section) {
  const Reflection* reflection = section->GetReflection();
  switch (KindOf(field)) {
    case FieldKind::kInteger: {
      int64_t value;
      if (!absl::SimpleAtoi(text, &value)) return TypeError(field, Quote(text));
      return SetInteger(value, Quote(text), field, section);
    }
    case FieldKind::kFloat: {
      double value;
      if (!absl::SimpleAtod(text, &value)) return TypeError(field, Quote(text));
      reflection->SetDouble(section, field, value);
      return absl::OkStatus();
    }
    case FieldKind::kBoolean: {
      bool value;
      if (!absl::SimpleAtob(text, &value)) return TypeError(field, Quote(text));
      reflection->SetBool(section, field, value);
      return absl::OkStatus();
    }
    case FieldKind::kString:
      reflection->SetString(section, field, text);
      return absl::OkStatus();
    case FieldKind::kStringList: {
      std::vector<std::string> items;
      for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
        items.emplace_back(absl::StripAsciiWhitespace(item));
      }
      SetList(items, field, section);
      return absl::OkStatus();
    }
  }
  return TypeError(field, Quote(text));
}

std::string TomlValue(const Message& section, const FieldDescriptor* field) {
  const Reflection* reflection = section.GetReflection();
  switch (KindOf(field)) {
    case FieldKind::kInteger:
      return absl::StrCat(reflection->GetInt32(section, field));
    case FieldKind::kFloat:
      return TomlFloat(reflection->GetDouble(section, field));
    case FieldKind::kBoolean:
      return reflection->GetBool(section, field) ? "true" : "false";
    case FieldKind::kString:
      return TomlString(reflection->GetString(section, field));
    case FieldKind::kStringList: {
      std::vector<std::string> items;
      for (int i = 0; i < reflection->FieldSize(section, field); ++i) {
        items.push_back(TomlString(reflection->GetRepeatedString(section, field, i)));
      }
      return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
    }
  }
  return "";
}

std::string QuotedList(const google::protobuf::RepeatedPtrField<std::string>& items) {
  return absl::StrJoin(items, ", ", [](std::string* out, const std::string& item) {
    absl::StrAppend(out, Quote(item));
  });
}

std::string RangeText(const FieldOptions& options) {
  std::string range;
  const bool has_min = options.HasExtension(titan::min_value);
  const bool has_max = options.HasExtension(titan::max_value);
  if (has_min && has_max) {
    range = absl::StrCat("a value in [", FormatNumber(options.GetExtension(titan::min_value)), ", ",
                         FormatNumber(options.GetExtension(titan::max_value)), "]");
  } else if (has_min) {
    range = absl::StrCat(">= ", FormatNumber(options.GetExtension(titan::min_value)));
  } else if (has_max) {
    range = absl::StrCat("<= ", FormatNumber(options.GetExtension(titan::max_value)));
  }
  if (!range.empty() && options.HasExtension(titan::unset_value)) {
    range = absl::StrCat(FormatNumber(options.GetExtension(titan::unset_value)), " or ", range);
  }
  return range;
}

absl::Status CheckField(absl::string_view section, const Message& message,
                        const FieldDescriptor* field) {
  const Reflection* reflection = message.GetReflection();
  const FieldOptions& options = field->options();
  switch (KindOf(field)) {
    case FieldKind::kInteger:
    case FieldKind::kFloat: {
      const double value = KindOf(field) == FieldKind::kInteger
                               ? reflection->GetInt32(message, field)
                               : reflection->GetDouble(message, field);
      if (options.HasExtension(titan::unset_value) &&
          value == options.GetExtension(titan::unset_value)) {
        return absl::OkStatus();
      }
      const bool below =
          options.HasExtension(titan::min_value) && value < options.GetExtension(titan::min_value);
      const bool above =
          options.HasExtension(titan::max_value) && value > options.GetExtension(titan::max_value);
      // NaN fails every comparison, so it is refused explicitly.
      if (below || above || value != value) {
        return absl::InvalidArgumentError(
            absl::StrCat("[", section, "] ", field->name(), "=", FormatNumber(value),
                         " is out of range: expected ", RangeText(options)));
      }
      return absl::OkStatus();
    }
    case FieldKind::kString:
      return CheckChoice(section, field, reflection->GetString(message, field));
    case FieldKind::kStringList:
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        if (absl::Status status =
                CheckChoice(section, field, reflection->GetRepeatedString(message, field, i));
            !status.ok()) {
          return status;
        }
      }
      return absl::OkStatus();
    case FieldKind::kBoolean:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace titan
