#include "lib/config/field_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "lib/config/job_config.pb.h"

namespace titan {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::FieldOptions;
using ::google::protobuf::Message;
using ::google::protobuf::Reflection;

namespace {

// absl has no edit distance; names are short, so the plain dynamic-programming table will do.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF),
// as TOML requires of every string; toml++ and nlohmann keep their checks internal.
bool IsUtf8(absl::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<uint8_t>(text[i]);
    const int length = byte < 0x80                   ? 1
                       : byte >= 0xC2 && byte < 0xE0 ? 2
                       : byte >= 0xE0 && byte < 0xF0 ? 3
                       : byte >= 0xF0 && byte < 0xF5 ? 4
                                                     : 0;
    if (length == 0 || i + length > text.size()) return false;
    uint32_t code = length == 1 ? byte : byte & (0x7F >> length);
    for (int k = 1; k < length; ++k) {
      const auto next = static_cast<uint8_t>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code = (code << 6) | (next & 0x3F);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < least[length] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return false;
    i += length;
  }
  return true;
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

absl::Status Error(absl::string_view where, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

absl::Status TypeError(absl::string_view where, const FieldDescriptor* field,
                       absl::string_view got) {
  return Error(where, absl::StrCat("expected ", TypeName(KindOf(field)), ", got ", got));
}

// The one int32 range check of TOML and command-line integers; `got` shows the value as written.
absl::StatusOr<int32_t> InInt32Range(int64_t value, absl::string_view got,
                                     absl::string_view where) {
  if (value < std::numeric_limits<int32_t>::min() || value > std::numeric_limits<int32_t>::max()) {
    return Error(where, absl::StrCat("expected 32-bit integer, got ", got));
  }
  return static_cast<int32_t>(value);
}

// A TOML number as a double: floats, and integers (which TOML writes without a '.').
std::optional<double> TomlNumber(const toml::node& node) {
  if (const auto* value = node.as_floating_point()) return value->get();
  if (const auto* value = node.as_integer()) return static_cast<double>(value->get());
  return std::nullopt;
}

// Each table of a list of tables: its keys are the fields of `field`'s message type.
absl::Status SetTablesFromToml(const toml::array& array, const FieldDescriptor* field,
                               Message* message, absl::string_view where) {
  const Reflection* reflection = message->GetReflection();
  reflection->ClearField(message, field);
  const Descriptor* type = field->message_type();
  std::vector<std::string> key_names;
  for (int i = 0; i < type->field_count(); ++i) key_names.push_back(type->field(i)->name());
  for (size_t i = 0; i < array.size(); ++i) {
    const toml::table* table = array[i].as_table();
    if (table == nullptr) {
      return Error(where, absl::StrCat("expected list of tables, got array containing ",
                                       DescribeTomlNode(array[i])));
    }
    Message* element = reflection->AddMessage(message, field);
    for (const auto& [key_name, node] : *table) {
      const std::string key(key_name.str());
      const std::string key_where = absl::StrCat(where, "[", i, "].", key);
      const FieldDescriptor* key_field = type->FindFieldByName(key);
      if (key_field == nullptr) {
        return Error(key_where,
                     absl::StrCat("unknown key", DidYouMean(Closest(key, key_names), "")));
      }
      if (absl::Status status = SetFromToml(node, key_field, element, key_where); !status.ok()) {
        return status;
      }
    }
  }
  return absl::OkStatus();
}

// The command line's value of a list of floats or tables (or of strings written as one): a TOML
// inline value, e.g. [{x = 1}].
absl::Status SetFromInlineToml(const std::string& text, const FieldDescriptor* field,
                               Message* message, absl::string_view where) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    message->GetReflection()->ClearField(message, field);
    return absl::OkStatus();
  }
  toml::table root;
  try {
    root = toml::parse(absl::StrCat("value = ", text));
  } catch (const toml::parse_error& error) {
    return Error(where,
                 absl::StrCat("expected ", TypeName(KindOf(field)), " as a TOML inline value, got ",
                              Quote(text), " (", std::string(error.description()), ")"));
  }
  // A newline in the text could smuggle in more keys than the one value.
  if (root.size() != 1) {
    return Error(where, absl::StrCat("expected one TOML inline value, got ", Quote(text)));
  }
  return SetFromToml(*root.get("value"), field, message, where);
}

absl::Status CheckChoice(absl::string_view name, const FieldDescriptor* field,
                         const std::string& value) {
  const auto& choices = field->options().GetRepeatedExtension(titan::choices);
  if (choices.empty() || std::find(choices.begin(), choices.end(), value) != choices.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, "=", Quote(value), ": expected one of ", QuotedList(choices)));
}

absl::Status CheckNumber(absl::string_view name, const FieldOptions& options, double value) {
  if (options.HasExtension(titan::unset_value) &&
      value == options.GetExtension(titan::unset_value)) {
    return absl::OkStatus();
  }
  const bool below =
      options.HasExtension(titan::min_value) && value < options.GetExtension(titan::min_value);
  const bool above =
      options.HasExtension(titan::max_value) &&
      (options.GetExtension(titan::max_exclusive) ? value >= options.GetExtension(titan::max_value)
                                                  : value > options.GetExtension(titan::max_value));
  // No key means anything by inf, and NaN fails every comparison: both are refused explicitly.
  // As ATen's conversion of a scalar to float32 checks (c10::overflows), inf included.
  const bool float32 = options.GetExtension(titan::float32);
  const bool past_float32 = float32 && std::abs(value) > std::numeric_limits<float>::max();
  if (below || above || !std::isfinite(value) || past_float32) {
    std::string expected = RangeText(options);
    // RangeText of a float32 key already says "finite".
    if (!std::isfinite(value) && !float32) {
      expected = expected.empty() ? "a finite number" : absl::StrCat("a finite number, ", expected);
    }
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", FormatNumber(value), " is out of range: expected ", expected));
  }
  return absl::OkStatus();
}

// `value`, or the choice it names in another case where the field takes any case.
std::string SpelledAsChoice(const FieldDescriptor* field, const std::string& value) {
  if (!field->options().GetExtension(titan::choices_ignore_case)) return value;
  for (const std::string& choice : field->options().GetRepeatedExtension(titan::choices)) {
    if (absl::EqualsIgnoreCase(choice, value)) return choice;
  }
  return value;
}

}  // namespace

FieldKind KindOf(const FieldDescriptor* field) {
  if (field->is_repeated()) {
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_DOUBLE:
        return FieldKind::kFloatList;
      case FieldDescriptor::CPPTYPE_MESSAGE:
        return FieldKind::kTableList;
      default:
        return FieldKind::kStringList;
    }
  }
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
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_BOOL:
      return !field->is_repeated();
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_STRING:
      return true;
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      // A list of tables whose keys are themselves scalars or lists (no tables in tables).
      if (!field->is_repeated()) return false;
      const Descriptor* type = field->message_type();
      for (int i = 0; i < type->field_count(); ++i) {
        if (type->field(i)->message_type() != nullptr || !IsSupportedField(type->field(i))) {
          return false;
        }
      }
      return true;
    }
    default:
      return false;
  }
}

absl::StatusOr<int32_t> ParseInt32(absl::string_view text, absl::string_view where) {
  int64_t value;
  if (!absl::SimpleAtoi(text, &value)) {
    return Error(where,
                 absl::StrCat("expected ", TypeName(FieldKind::kInteger), ", got ", Quote(text)));
  }
  return InInt32Range(value, Quote(text), where);
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
    case FieldKind::kFloatList:
      return "list of floats";
    case FieldKind::kTableList:
      return "list of tables";
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

std::optional<std::string> Closest(absl::string_view name,
                                   const std::vector<std::string>& candidates) {
  if (name.size() >= 4) {
    std::optional<std::string> only_extension;
    int extensions = 0;
    for (const std::string& candidate : candidates) {
      if (absl::StartsWith(candidate, name)) {
        only_extension = candidate;
        ++extensions;
      }
    }
    if (extensions == 1) return only_extension;
  }
  const size_t limit = std::max<size_t>(2, name.size() / 3);
  std::optional<std::string> best;
  size_t best_distance = 0;
  for (const std::string& candidate : candidates) {
    // The distance is at least the difference in length: a long name skips the table.
    if (std::max(name.size(), candidate.size()) - std::min(name.size(), candidate.size()) > limit) {
      continue;
    }
    const size_t distance = EditDistance(name, candidate);
    if (distance > limit) continue;
    if (!best || distance < best_distance || (distance == best_distance && candidate < *best)) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string DidYouMean(const std::optional<std::string>& suggestion, absl::string_view prefix) {
  if (!suggestion) return "";
  return absl::StrCat(" (did you mean \"", prefix, *suggestion, "\"?)");
}

bool ParseBoolean(absl::string_view text, bool* value) {
  // TOML's two spellings only, so a flag takes what a job file takes.
  if (text != "true" && text != "false") return false;
  *value = text == "true";
  return true;
}

void SetList(const std::vector<std::string>& items, const FieldDescriptor* field,
             Message* message) {
  const Reflection* reflection = message->GetReflection();
  reflection->ClearField(message, field);
  for (const std::string& item : items) reflection->AddString(message, field, item);
}

absl::Status SetFromToml(const toml::node& node, const FieldDescriptor* field, Message* message,
                         absl::string_view where) {
  const Reflection* reflection = message->GetReflection();
  switch (KindOf(field)) {
    case FieldKind::kInteger:
      if (const auto* value = node.as_integer()) {
        const absl::StatusOr<int32_t> in_range =
            InInt32Range(value->get(), DescribeTomlNode(node), where);
        if (!in_range.ok()) return in_range.status();
        reflection->SetInt32(message, field, *in_range);
        return absl::OkStatus();
      }
      break;
    case FieldKind::kFloat:
      if (const std::optional<double> value = TomlNumber(node)) {
        reflection->SetDouble(message, field, *value);
        return absl::OkStatus();
      }
      break;
    case FieldKind::kBoolean:
      if (const auto* value = node.as_boolean()) {
        reflection->SetBool(message, field, value->get());
        return absl::OkStatus();
      }
      break;
    case FieldKind::kString:
      if (const auto* value = node.as_string()) {
        reflection->SetString(message, field, SpelledAsChoice(field, value->get()));
        return absl::OkStatus();
      }
      break;
    case FieldKind::kStringList:
      if (const toml::array* array = node.as_array()) {
        std::vector<std::string> items;
        for (const toml::node& item : *array) {
          const auto* text = item.as_string();
          if (text == nullptr) {
            return Error(where, absl::StrCat("expected list of strings, got array containing ",
                                             DescribeTomlNode(item)));
          }
          items.push_back(text->get());
        }
        SetList(items, field, message);
        return absl::OkStatus();
      }
      break;
    case FieldKind::kFloatList:
      if (const toml::array* array = node.as_array()) {
        reflection->ClearField(message, field);
        for (const toml::node& item : *array) {
          const std::optional<double> value = TomlNumber(item);
          if (!value) {
            return Error(where, absl::StrCat("expected list of floats, got array containing ",
                                             DescribeTomlNode(item)));
          }
          reflection->AddDouble(message, field, *value);
        }
        return absl::OkStatus();
      }
      break;
    case FieldKind::kTableList:
      if (const toml::array* array = node.as_array()) {
        return SetTablesFromToml(*array, field, message, where);
      }
      break;
  }
  return TypeError(where, field, DescribeTomlNode(node));
}

absl::Status SetFromText(const std::string& text, const FieldDescriptor* field, Message* message,
                         absl::string_view where) {
  const Reflection* reflection = message->GetReflection();
  // config.toml could not write it back (TOML strings are UTF-8): a resume from it would differ.
  if (!IsUtf8(text)) {
    return Error(where,
                 absl::StrCat("expected UTF-8 text (TOML, and config.toml, hold only UTF-8), "
                              "got ",
                              Quote(text)));
  }
  switch (KindOf(field)) {
    case FieldKind::kInteger: {
      const absl::StatusOr<int32_t> value = ParseInt32(text, where);
      if (!value.ok()) return value.status();
      reflection->SetInt32(message, field, *value);
      return absl::OkStatus();
    }
    case FieldKind::kFloat: {
      double value;
      if (!absl::SimpleAtod(text, &value)) return TypeError(where, field, Quote(text));
      reflection->SetDouble(message, field, value);
      return absl::OkStatus();
    }
    case FieldKind::kBoolean: {
      bool value;
      if (!ParseBoolean(text, &value)) {
        return Error(where, absl::StrCat("expected true or false, got ", Quote(text)));
      }
      reflection->SetBool(message, field, value);
      return absl::OkStatus();
    }
    case FieldKind::kString:
      reflection->SetString(message, field, SpelledAsChoice(field, text));
      return absl::OkStatus();
    case FieldKind::kStringList: {
      // A TOML array too (["a", "b"]), as a job file writes it and other lists take it.
      if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(text), "[")) {
        return SetFromInlineToml(text, field, message, where);
      }
      std::vector<std::string> items;
      // Nothing at all is the empty list; an empty item in a list ("a,,b", "a,") is a slip.
      if (!absl::StripAsciiWhitespace(text).empty()) {
        for (absl::string_view item : absl::StrSplit(text, ',')) {
          item = absl::StripAsciiWhitespace(item);
          if (item.empty()) {
            return Error(where,
                         absl::StrCat("an empty item in the comma-separated list ", Quote(text)));
          }
          items.emplace_back(item);
        }
      }
      SetList(items, field, message);
      return absl::OkStatus();
    }
    case FieldKind::kFloatList:
    case FieldKind::kTableList:
      return SetFromInlineToml(text, field, message, where);
  }
  return TypeError(where, field, Quote(text));
}

std::string TomlValue(const Message& message, const FieldDescriptor* field) {
  const Reflection* reflection = message.GetReflection();
  std::vector<std::string> items;
  switch (KindOf(field)) {
    case FieldKind::kInteger:
      return absl::StrCat(reflection->GetInt32(message, field));
    case FieldKind::kFloat:
      return TomlFloat(reflection->GetDouble(message, field));
    case FieldKind::kBoolean:
      return reflection->GetBool(message, field) ? "true" : "false";
    case FieldKind::kString:
      return TomlString(reflection->GetString(message, field));
    case FieldKind::kStringList:
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        items.push_back(TomlString(reflection->GetRepeatedString(message, field, i)));
      }
      break;
    case FieldKind::kFloatList:
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        items.push_back(TomlFloat(reflection->GetRepeatedDouble(message, field, i)));
      }
      break;
    case FieldKind::kTableList:
      // Inline tables with the keys that were set, so unset ones keep meaning "inherit".
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        const Message& element = reflection->GetRepeatedMessage(message, field, i);
        std::vector<const FieldDescriptor*> set_fields;
        element.GetReflection()->ListFields(element, &set_fields);
        items.push_back(absl::StrCat(
            "{",
            absl::StrJoin(set_fields, ", ",
                          [&](std::string* out, const FieldDescriptor* key) {
                            absl::StrAppend(out, key->name(), " = ", TomlValue(element, key));
                          }),
            "}"));
      }
      break;
  }
  return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
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
  const bool exclusive = options.GetExtension(titan::max_exclusive);
  if (has_min && has_max) {
    range =
        absl::StrCat("a value in [", FormatNumber(options.GetExtension(titan::min_value)), ", ",
                     FormatNumber(options.GetExtension(titan::max_value)), exclusive ? ")" : "]");
  } else if (has_min) {
    range = absl::StrCat(">= ", FormatNumber(options.GetExtension(titan::min_value)));
  } else if (has_max) {
    range = absl::StrCat(exclusive ? "< " : "<= ",
                         FormatNumber(options.GetExtension(titan::max_value)));
  }
  if (!range.empty() && options.HasExtension(titan::unset_value)) {
    range = absl::StrCat(FormatNumber(options.GetExtension(titan::unset_value)), " or ", range);
  }
  if (options.GetExtension(titan::float32)) {
    // As a double: float's shortest text (3.4028235e+38) is itself past the bound.
    const std::string float32 =
        absl::StrCat("a finite value representable as float32 (magnitude <= ",
                     FormatNumber(double{std::numeric_limits<float>::max()}), ")");
    range = range.empty() ? float32 : absl::StrCat(range, " and ", float32);
  }
  return range;
}

absl::Status CheckField(absl::string_view prefix, const Message& message,
                        const FieldDescriptor* field) {
  const Reflection* reflection = message.GetReflection();
  const std::string name = absl::StrCat(prefix, field->name());
  switch (KindOf(field)) {
    case FieldKind::kInteger:
      return CheckNumber(name, field->options(), reflection->GetInt32(message, field));
    case FieldKind::kFloat:
      return CheckNumber(name, field->options(), reflection->GetDouble(message, field));
    case FieldKind::kString:
      return CheckChoice(name, field, reflection->GetString(message, field));
    case FieldKind::kStringList:
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        if (absl::Status status =
                CheckChoice(name, field, reflection->GetRepeatedString(message, field, i));
            !status.ok()) {
          return status;
        }
      }
      return absl::OkStatus();
    case FieldKind::kFloatList:
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        if (absl::Status status = CheckNumber(name, field->options(),
                                              reflection->GetRepeatedDouble(message, field, i));
            !status.ok()) {
          return status;
        }
      }
      return absl::OkStatus();
    case FieldKind::kTableList:
      // Only the keys a table sets: the others are not part of the configuration.
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        const Message& element = reflection->GetRepeatedMessage(message, field, i);
        std::vector<const FieldDescriptor*> set_fields;
        element.GetReflection()->ListFields(element, &set_fields);
        for (const FieldDescriptor* key : set_fields) {
          if (absl::Status status = CheckField(absl::StrCat(name, "[", i, "]."), element, key);
              !status.ok()) {
            return status;
          }
        }
      }
      return absl::OkStatus();
    case FieldKind::kBoolean:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

std::string FormatNumber(double value) {
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

}  // namespace titan
