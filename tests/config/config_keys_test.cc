// Every key of the job schema is either read by the code or refused: no key is accepted and
// silently ignored.
//  - A key marked (unsupported) must stop ValidateJobConfig with its name when set to anything
//    but its default (checked here by setting one).
//  - A key whose choices allow one value is a constant the code implements (norm_type: rmsnorm).
//  - Any other key must be read outside lib/config: its accessor `<key>()` must appear in a source
//    file (`<key>` for lists) under lib/, tools/ or models/ that also reads its section
//    (`<section>()`, or takes the section's message, `JobConfig::<Section>`), or whose class header
//    does (a class split over foo.cc and foo_part.cc declares its section member in foo.h). A
//    generic name (steps, enable) could be found reading another section in the same file; the
//    behaviour of each key is tested where it is implemented, this catches keys that nothing reads
//    at all.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "lib/config/job_config.h"

namespace titan {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;

struct SourceFile {
  std::string path;
  std::string text;
  std::string header;  // of its class: <dir>/<longest '_'-prefix of its stem>.h, if any
};

// Sets each .cc file's `header`: rl_trainer_setup.cc's is rl_trainer.h.
void FindClassHeaders(std::vector<SourceFile>& files) {
  std::map<std::string, const std::string*> headers;
  for (const SourceFile& file : files) {
    if (absl::EndsWith(file.path, ".h")) headers[file.path] = &file.text;
  }
  for (SourceFile& file : files) {
    if (!absl::EndsWith(file.path, ".cc")) continue;
    std::string stem = file.path.substr(0, file.path.size() - 3);
    for (;;) {
      const auto header = headers.find(stem + ".h");
      if (header != headers.end()) {
        file.header = *header->second;
        break;
      }
      const size_t cut = stem.rfind('_');
      if (cut == std::string::npos || cut < stem.rfind('/')) break;
      stem.resize(cut);
    }
  }
}

std::vector<SourceFile> ReadSources() {
  std::vector<SourceFile> files;
  for (const char* top : {"lib", "tools", "models"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(top)) {
      const std::string path = entry.path().string();
      if (!entry.is_regular_file() || absl::StartsWith(path, "lib/config/")) continue;
      if (!absl::EndsWith(path, ".cc") && !absl::EndsWith(path, ".h")) continue;
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      files.push_back({path, text.str(), ""});
    }
  }
  FindClassHeaders(files);
  return files;
}

// A value for `field` other than its default that passes the key's own checks (choices, range).
std::string NonDefaultValue(const FieldDescriptor* field) {
  const auto& choices = field->options().GetRepeatedExtension(titan::choices);
  if (field->is_repeated()) return choices.empty() ? "x" : choices[0];  // one item, not the default
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return std::to_string(field->default_value_int32() == 2 ? 4 : 2);
    case FieldDescriptor::CPPTYPE_BOOL:
      return field->default_value_bool() ? "false" : "true";
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return "0.5";
    default:
      for (const std::string& choice : choices) {
        if (choice != field->default_value_string()) return choice;
      }
      return "x";
  }
}

TEST(ConfigKeysTest, EveryKeyIsReadOrRefused) {
  const std::vector<SourceFile> sources = ReadSources();
  ASSERT_GT(sources.size(), 50u) << "source files missing from the test's data";
  const Descriptor* root = JobConfig::descriptor();
  int read = 0, refused = 0;
  for (int i = 0; i < root->field_count(); ++i) {
    const FieldDescriptor* section = root->field(i);
    for (int j = 0; j < section->message_type()->field_count(); ++j) {
      const FieldDescriptor* field = section->message_type()->field(j);
      const std::string key = absl::StrCat(section->name(), ".", field->name());
      if (!field->options().GetExtension(titan::unsupported).empty()) {
        // World size 2 lets parallel degrees of 2 multiply out.
        const std::string flag = absl::StrCat("--", key, "=", NonDefaultValue(field));
        absl::StatusOr<JobConfig> config = ParseJobConfigText("", "test", {flag});
        ASSERT_TRUE(config.ok()) << flag << ": " << config.status();
        const absl::Status status = ValidateJobConfig(*config, 2);
        EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << flag << ": " << status;
        // The refusal names the flag that set the key, then the key.
        EXPECT_TRUE(absl::StartsWith(
            status.message(), absl::StrCat("--", key, ": [", section->name(), "] ", field->name())))
            << flag << ": " << status;
        ++refused;
        continue;
      }
      if (key == "job.config_file") continue;  // the loader in lib/config reads the file itself
      if (field->options().GetRepeatedExtension(titan::choices).size() == 1) continue;
      // A list's accessors take an index: param_groups(i), param_groups_size().
      const std::string accessor = absl::StrCat(field->name(), field->is_repeated() ? "" : "()");
      const std::string section_accessor = absl::StrCat(section->name(), "()");
      const std::string section_type = absl::StrCat("JobConfig::", section->message_type()->name());
      bool found = false;
      for (const SourceFile& file : sources) {
        const auto reads_section = [&](const std::string& text) {
          return absl::StrContains(text, section_accessor) || absl::StrContains(text, section_type);
        };
        if (absl::StrContains(file.text, accessor) &&
            (reads_section(file.text) || reads_section(file.header))) {
          found = true;
          break;
        }
      }
      EXPECT_TRUE(found) << key << " is neither read outside lib/config nor marked (unsupported)";
      ++read;
    }
  }
  std::cout << read << " keys read, " << refused << " refused until implemented\n";
}

}  // namespace
}  // namespace titan
