#ifndef TITAN_LIB_DATA_TEXT_DATA_LOADER_H_
#define TITAN_LIB_DATA_TEXT_DATA_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/data/packed_text_dataset.h"
#include "nlohmann/json.hpp"

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
// Optionally reads and tokenizes ahead on a thread of its own, so a step never waits for data.
class TextDataLoader {
 public:
  // `warn_relooped`: log when a batch starts a new pass over an infinite dataset (passes 1, 2,
  // 4, 8, ...); a loader built afresh for every evaluation would log it each time.
  explicit TextDataLoader(std::unique_ptr<PackedTextDataset> dataset, bool warn_relooped = true);
  ~TextDataLoader();  // stops the read-ahead thread

  // From now on a thread prepares up to `depth` batches of `local_batch_size` ahead; NextBatch
  // must then ask for that size. Every rank tokenizes the whole stream to find its windows (the
  // packing is exact, whatever the data-parallel degree), so ahead of the step is where that
  // work belongs.
  void StartReadAhead(int64_t local_batch_size, int depth);

  // The next `local_batch_size` windows. At the end of a finite dataset the last batch may be
  // smaller (ranks may then differ by one row); after it, OutOfRange.
  absl::StatusOr<TokenBatch> NextBatch(int64_t local_batch_size);

  // Waits for the batch NextBatch would return next (with read-ahead, without taking it) and
  // returns its error: a run refuses bad data (a missing text field, a malformed line) before it
  // makes its outputs. OK without read-ahead, where reading a batch would take it.
  absl::Status CheckNextBatch();

  // The position after the last batch returned (batches read ahead are not counted).
  nlohmann::json StateDict() const;
  absl::Status LoadStateDict(const nlohmann::json& state);

  PackedTextDataset& dataset() { return *dataset_; }

 private:
  // A batch read ahead and the dataset's state right after it.
  struct Prepared {
    absl::StatusOr<TokenBatch> batch;
    nlohmann::json state;
    int64_t epoch = 0;
  };

  // Warns when a batch returned took the data from `from_epoch` into a new pass (at passes 1, 2,
  // 4, 8, ...): as it is trained on, not as it is read ahead (maybe for a resume that moves on).
  void WarnIfRelooped(int64_t from_epoch, int64_t to_epoch) const;

  absl::StatusOr<TokenBatch> ReadBatch(int64_t local_batch_size);
  void ReadAhead();
  void StopReadAhead();

  std::unique_ptr<PackedTextDataset> dataset_;
  const bool warn_relooped_;
  int64_t ahead_batch_size_ = 0;  // 0: no read-ahead
  int ahead_depth_ = 0;
  std::thread reader_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Prepared> prepared_;
  bool stop_ = false;
  nlohmann::json consumed_state_;  // with read-ahead: the state after the last batch returned
  int64_t consumed_epoch_ = 0;     // with read-ahead: the epoch after the last batch returned
};

}  // namespace titan

#endif  // TITAN_LIB_DATA_TEXT_DATA_LOADER_H_
