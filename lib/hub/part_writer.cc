#include "lib/hub/part_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/hub/progress.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

bool SameTime(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

}  // namespace

FileStamp FileStamp::Of(const struct stat& st) {
  return FileStamp{st.st_dev, st.st_ino, st.st_nlink, st.st_size, st.st_mtim, st.st_ctim};
}

absl::StatusOr<FileStamp> FileStamp::OfFd(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoError("fstat", path);
  return Of(st);
}

std::string ChangeSince(const FileStamp& before, const FileStamp& now) {
  if (now.device != before.device || now.inode != before.inode || now.links == 0) {
    return "was replaced or deleted";
  }
  if (now.size != before.size) {
    return absl::StrCat("changed size (", before.size, " bytes, now ", now.size, ")");
  }
  if (!SameTime(now.ctime, before.ctime) || !SameTime(now.mtime, before.mtime)) {
    return "was rewritten in place (its ctime or mtime moved)";
  }
  return "";
}

PartWriter::PartWriter(std::string path, int fd, const FileStamp& last_change, int64_t start_offset,
                       int64_t expected_size, std::function<void(absl::string_view)> on_written)
    : path_(std::move(path)),
      fd_(fd),
      start_offset_(start_offset),
      expected_size_(expected_size),
      on_written_(std::move(on_written)),
      stamp_(last_change) {}

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
  absl::StatusOr<FileStamp> before = FileStamp::OfFd(fd_, path_);
  if (!before.ok()) return before.status();
  if (const std::string change = ChangeSince(stamp_, *before); !change.empty()) {
    return absl::DataLossError(
        absl::StrCat(path_, ": the part file ", change, " during the download"));
  }
  size_t done = 0;
  absl::Status status = WriteAll(block, &done);
  if (done > 0) {  // a failed write may still have appended part of the block: this writer's change
    absl::StatusOr<FileStamp> after = FileStamp::OfFd(fd_, path_);
    if (!after.ok() && status.ok()) status = after.status();
    if (after.ok()) stamp_ = *after;
  }
  if (status.ok()) written_ += static_cast<int64_t>(block.size());
  return status;
}

absl::Status PartWriter::WriteAll(const std::vector<char>& block, size_t* done) {
  while (*done < block.size()) {
    const ssize_t n = ::write(fd_, block.data() + *done, block.size() - *done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == ENOSPC || errno == EDQUOT)) {
      const int64_t on_disk = start_offset_ + written_ + static_cast<int64_t>(*done);
      return absl::ResourceExhaustedError(absl::StrCat(
          path_, ": disk full after ", HumanBytes(on_disk),
          expected_size_ >= 0
              ? absl::StrCat(" of ", HumanBytes(expected_size_), "; free at least ",
                             HumanBytes(expected_size_ - on_disk), " more and re-run to resume")
              : "; free space and re-run to resume"));
    }
    if (n < 0) return ErrnoError("write", path_);
    *done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace titan
