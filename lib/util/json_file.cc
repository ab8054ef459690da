#include "lib/util/json_file.h"

#include "lib/util/file_util.h"

namespace titan {

absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return ParseJsonText(*text, path);
}

}  // namespace titan
