#ifndef TITAN_LIB_DATA_DATA_FILES_H_
#define TITAN_LIB_DATA_DATA_FILES_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace titan {

// The data files under `path` in reading order (a file alone, or a folder's .jsonl/.json files,
// gzipped or not, in Hugging Face datasets' order), with their names relative to `path`; of a
// folder, those of split `wanted` by Hugging Face datasets' file naming, or all of them where no
// name marks a split (`*split` is set to the split read, "" for all).
absl::Status ListDataFiles(const std::string& path, const std::string& wanted,
                           std::vector<std::string>* files, std::vector<std::string>* names,
                           std::string* split);

}  // namespace titan

#endif  // TITAN_LIB_DATA_DATA_FILES_H_
