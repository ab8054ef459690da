#ifndef TITAN_LIB_DATA_TEXT_DATA_LOADER_H_
#define TITAN_LIB_DATA_TEXT_DATA_LOADER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/data/packed_text_dataset.h"
#include "nlohmann/json_fwd.hpp"

namespace titan {

// A local batch of next-token prediction examples, row-major [batch_size, seq_len].
struct TokenBatch {
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  std::vector<int64_t> inputs;  // window[:-1] of each row
  std::vector<int64_t> labels;  // window[1:] of each row
};

// Groups this rank's windows into batches (torchtitan's ParallelAwareDataloader): with the same
// global batch, the rows of one step over all ranks are the windows one process would read.
class TextDataLoader {
 public:
  explicit TextDataLoader(std::unique_ptr<PackedTextDataset> dataset);

  // The next `local_batch_size` windows. At the end of a finite dataset the last batch may be
  // smaller (ranks may then differ by one row); after it, OutOfRange.
  absl::StatusOr<TokenBatch> NextBatch(int64_t local_batch_size);

  // The dataset's state: the loader keeps no windows between batches.
  nlohmann::json StateDict() const;
  absl::Status LoadStateDict(const nlohmann::json& state);

  PackedTextDataset& dataset() { return *dataset_; }

 private:
  std::unique_ptr<PackedTextDataset> dataset_;
};

}  // namespace titan

#endif  // TITAN_LIB_DATA_TEXT_DATA_LOADER_H_
