#include "lib/data/text_data_loader.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace titan {

TextDataLoader::TextDataLoader(std::unique_ptr<PackedTextDataset> dataset, bool warn_relooped)
    : dataset_(std::move(dataset)), warn_relooped_(warn_relooped) {}

TextDataLoader::~TextDataLoader() { StopReadAhead(); }

absl::StatusOr<TokenBatch> TextDataLoader::ReadBatch(int64_t local_batch_size) {
  const int64_t seq_len = dataset_->seq_len();
  TokenBatch batch;
  batch.seq_len = seq_len;
  // Caught here: thrown on the read-ahead thread, bad_alloc would end the process with no message.
  try {
    batch.inputs.reserve(local_batch_size * seq_len);
    batch.labels.reserve(local_batch_size * seq_len);
    for (; batch.batch_size < local_batch_size; ++batch.batch_size) {
      absl::StatusOr<std::vector<int32_t>> window = dataset_->NextWindow();
      if (absl::IsOutOfRange(window.status()) && batch.batch_size > 0) break;
      if (!window.ok()) return window.status();
      batch.inputs.insert(batch.inputs.end(), window->begin(), window->end() - 1);
      batch.labels.insert(batch.labels.end(), window->begin() + 1, window->end());
    }
  } catch (const std::exception& e) {  // bad_alloc, or length_error past the vector's max_size
    return absl::ResourceExhaustedError(
        absl::StrCat("data loader: a batch of ", local_batch_size, " x ", seq_len,
                     " tokens does not fit in memory (local batch size x seq_len)"));
  }
  return batch;
}

void TextDataLoader::StartReadAhead(int64_t local_batch_size, int depth) {
  StopReadAhead();
  ahead_batch_size_ = local_batch_size;
  ahead_depth_ = std::max(1, depth);
  consumed_state_ = dataset_->StateDict();
  consumed_epoch_ = dataset_->epoch();
  stop_ = false;
  reader_ = std::thread([this] { ReadAhead(); });
}

void TextDataLoader::ReadAhead() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] {
        return stop_ || static_cast<int>(prepared_.size()) < ahead_depth_;
      });
      if (stop_) return;
    }
    Prepared next{ReadBatch(ahead_batch_size_), dataset_->StateDict(), dataset_->epoch()};
    const bool done = !next.batch.ok();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      prepared_.push_back(std::move(next));
    }
    changed_.notify_all();
    if (done) return;  // the end of the data or an error: the consumer sees it in order
  }
}

void TextDataLoader::StopReadAhead() {
  if (!reader_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  reader_.join();
  prepared_.clear();
}

absl::StatusOr<TokenBatch> TextDataLoader::NextBatch(int64_t local_batch_size) {
  if (local_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: local batch size must be at least 1, got ", local_batch_size));
  }
  if (ahead_batch_size_ == 0) {
    const int64_t epoch = dataset_->epoch();
    absl::StatusOr<TokenBatch> batch = ReadBatch(local_batch_size);
    WarnIfRelooped(epoch, dataset_->epoch());
    return batch;
  }
  if (local_batch_size != ahead_batch_size_) {
    return absl::FailedPreconditionError(absl::StrCat("data loader: reading ahead batches of ",
                                                      ahead_batch_size_, ", asked for ",
                                                      local_batch_size));
  }
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !prepared_.empty(); });
  // The end of the data or an error stays at the front: every later call sees it too.
  if (!prepared_.front().batch.ok()) return prepared_.front().batch.status();
  Prepared next = std::move(prepared_.front());
  prepared_.pop_front();
  consumed_state_ = std::move(next.state);
  lock.unlock();
  changed_.notify_all();
  WarnIfRelooped(consumed_epoch_, next.epoch);
  consumed_epoch_ = next.epoch;
  return std::move(next.batch);
}

absl::Status TextDataLoader::CheckNextBatch() {
  if (ahead_batch_size_ == 0) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !prepared_.empty(); });
  return prepared_.front().batch.status();
}

void TextDataLoader::WarnIfRelooped(int64_t from_epoch, int64_t to_epoch) const {
  int64_t power_of_two = 1;  // the largest not above to_epoch
  while (power_of_two <= to_epoch / 2) power_of_two *= 2;
  // Only at powers of two: a tiny dataset would otherwise log a line per pass.
  LOG_IF(WARNING, warn_relooped_ && to_epoch > from_epoch && power_of_two > from_epoch)
      << "Dataset " << dataset_->path() << " is being re-looped: starting epoch " << to_epoch
      << " (0-based; later passes are logged at powers of two)";
}

nlohmann::json TextDataLoader::StateDict() const {
  return ahead_batch_size_ == 0 ? dataset_->StateDict() : consumed_state_;
}

absl::Status TextDataLoader::LoadStateDict(const nlohmann::json& state) {
  const int64_t ahead = ahead_batch_size_;
  StopReadAhead();
  absl::Status loaded = dataset_->LoadStateDict(state);
  if (ahead > 0) StartReadAhead(ahead, ahead_depth_);
  return loaded;
}

}  // namespace titan
