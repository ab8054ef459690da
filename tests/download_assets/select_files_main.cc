// For glob_parity_test.py: reads [{"include": [...], "exclude": [...], "all": bool,
// "paths": [...]}, ...] on stdin and prints, per case, the paths SelectFiles keeps (a JSON list
// of lists), or exits 1 with its error.

#include <iostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/hub/asset_plan.h"
#include "nlohmann/json.hpp"

int main() {
  const nlohmann::json cases = nlohmann::json::parse(std::cin);
  nlohmann::json kept = nlohmann::json::array();
  for (const nlohmann::json& one : cases) {
    titan::AssetSelection selection;
    selection.all = one.at("all").get<bool>();
    selection.include = one.at("include").get<std::vector<std::string>>();
    selection.exclude = one.at("exclude").get<std::vector<std::string>>();
    titan::RepoSnapshot snapshot;
    for (const std::string& path : one.at("paths").get<std::vector<std::string>>()) {
      snapshot.files.push_back(titan::RemoteFile{path});
    }
    absl::StatusOr<std::vector<titan::RemoteFile>> files =
        titan::SelectFiles(snapshot, selection, "");
    if (!files.ok()) {
      std::cerr << files.status() << "\n";
      return 1;
    }
    nlohmann::json paths = nlohmann::json::array();
    for (const titan::RemoteFile& file : *files) paths.push_back(file.path);
    kept.push_back(paths);
  }
  std::cout << kept.dump() << "\n";
  return 0;
}
