#ifndef TITAN_LIB_DATA_DATA_SPLITS_H_
#define TITAN_LIB_DATA_DATA_SPLITS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// One split of a dataset folder: its name and its files, relative to the folder, in the order
// given.
struct DataSplit {
  std::string name;
  std::vector<std::string> files;
};

// The splits of a dataset folder by its files' names, as Hugging Face datasets (5.x,
// data_files.get_data_patterns) infers them from `files` (paths relative to the folder, '/'
// separated): train, validation, test (then others) in that order, empty splits left out. Empty
// when no name marks a split (HF then calls every file "train"). A sharded file whose split name
// HF refuses is refused, naming the file.
absl::StatusOr<std::vector<DataSplit>> InferDataSplits(const std::vector<std::string>& files);

// The words that name default split `split` (train, validation, test) in file and folder names,
// as "train*, training*"; "" for another split.
std::string SplitNamePatterns(absl::string_view split);

}  // namespace titan

#endif  // TITAN_LIB_DATA_DATA_SPLITS_H_
