#include "lib/hub/part_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/hub/progress.h"
#include "lib/util/file_util.h"

namespace titan {

PartWriter::PartWriter(std::string path, int fd, int64_t start_offset, int64_t expected_size,
                       std::function<void(absl::string_view)> on_written)
    : path_(std::move(path)),
      fd_(fd),
      start_offset_(start_offset),
      expected_size_(expected_size),
      on_written_(std::move(on_written)) {}

PartWriter::~PartWriter() { Finish().IgnoreError(); }

absl::Status PartWriter::Append(absl::string_view data) {
  while (!data.empty()) {
    if (filling_.capacity() < kBlockSize) filling_.reserve(kBlockSize);
    const size_t take = std::min(data.size(), kBlockSize - filling_.size());
    filling_.insert(filling_.end(), data.data(), data.data() + take);
    data.remove_prefix(take);
    accepted_ += static_cast<int64_t>(take);
    if (filling_.size() == kBlockSize) {
      if (absl::Status status = Submit(); !status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

absl::Status PartWriter::Submit() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queued_.size() < kMaxQueuedBlocks || !status_.ok(); });
  if (!status_.ok()) return status_;
  queued_.push_back(std::move(filling_));
  filling_ = std::vector<char>();
  if (!spare_.empty()) {
    filling_ = std::move(spare_.back());
    spare_.pop_back();
  }
  if (!write_thread_.joinable()) {
    write_thread_ = std::thread(&PartWriter::WriteLoop, this);
    digest_thread_ = std::thread(&PartWriter::DigestLoop, this);
  }
  changed_.notify_all();
  return absl::OkStatus();
}

absl::Status PartWriter::Finish() {
  if (finished_) return status_;
  finished_ = true;
  if (!write_thread_.joinable()) {
    if (!filling_.empty()) {
      status_ = WriteBlock(filling_);
      if (status_.ok()) on_written_(absl::string_view(filling_.data(), filling_.size()));
    }
    return status_;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!filling_.empty() && status_.ok()) queued_.push_back(std::move(filling_));
    closing_ = true;
    changed_.notify_all();
  }
  write_thread_.join();
  digest_thread_.join();
  return status_;
}

void PartWriter::WriteLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock,
                  [&] { return blocks_written_ < queued_.size() || closing_ || !status_.ok(); });
    if (!status_.ok() || blocks_written_ == queued_.size()) break;
    const std::vector<char>& block = queued_[blocks_written_];
    lock.unlock();
    absl::Status status = WriteBlock(block);
    lock.lock();
    if (status.ok()) {
      ++blocks_written_;
    } else {
      status_ = std::move(status);
    }
    changed_.notify_all();
  }
  writing_done_ = true;
  changed_.notify_all();
}

void PartWriter::DigestLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return blocks_written_ > 0 || writing_done_; });
    if (blocks_written_ == 0) break;
    std::vector<char>& block = queued_.front();
    lock.unlock();
    on_written_(absl::string_view(block.data(), block.size()));
    lock.lock();
    block.clear();
    spare_.push_back(std::move(block));
    queued_.pop_front();
    --blocks_written_;
    changed_.notify_all();
  }
}

absl::Status PartWriter::WriteBlock(const std::vector<char>& block) {
  size_t done = 0;
  while (done < block.size()) {
    const ssize_t n = ::write(fd_, block.data() + done, block.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == ENOSPC || errno == EDQUOT)) {
      const int64_t on_disk = start_offset_ + written_ + static_cast<int64_t>(done);
      return absl::ResourceExhaustedError(absl::StrCat(
          path_, ": disk full after ", HumanBytes(on_disk),
          expected_size_ >= 0
              ? absl::StrCat(" of ", HumanBytes(expected_size_), "; free at least ",
                             HumanBytes(expected_size_ - on_disk), " more and re-run to resume")
              : "; free space and re-run to resume"));
    }
    if (n < 0) return ErrnoError("write", path_);
    done += static_cast<size_t>(n);
  }
  written_ += static_cast<int64_t>(block.size());
  return absl::OkStatus();
}

}  // namespace titan
