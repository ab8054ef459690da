#ifndef TITAN_LIB_HUB_PART_WRITER_H_
#define TITAN_LIB_HUB_PART_WRITER_H_

// Appends a download's body to an open part file in a three-stage pipeline: the caller's thread
// gathers libcurl's 16 KiB pieces into large blocks (few write() calls), one thread writes them,
// another hands each written block to a callback (the digest), so that receiving, writing and
// hashing run on separate cores. The digest hashes the bytes written, not the file read back: a
// FileStamp taken after each write shows whether anything else changed the file since.

#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// What stat says of a file, enough to tell whether it changed: any write, truncation or unlink
// moves its ctime (chmod too), and a rename over its path shows as another inode.
struct FileStamp {
  dev_t device = 0;
  ino_t inode = 0;
  nlink_t links = 0;
  int64_t size = -1;
  struct timespec mtime {};
  struct timespec ctime {};

  static FileStamp Of(const struct stat& st);
  // fstat(fd) as a stamp; the error names `path`.
  static absl::StatusOr<FileStamp> OfFd(int fd, const std::string& path);
};

// How `now` differs from `before`, as the end of "the part file …": "was replaced or deleted",
// "changed size (B bytes, now N)", "was rewritten in place (its ctime or mtime moved)"; empty
// when it did not change.
std::string ChangeSince(const FileStamp& before, const FileStamp& now);

class PartWriter {
 public:
  static constexpr size_t kBlockSize = 1 << 20;
  // Blocks being written or digested; Append waits beyond this, which bounds memory.
  static constexpr size_t kMaxQueuedBlocks = 3;

  // Appends to `fd` (open with O_APPEND, not owned), which holds `start_offset` bytes of a file
  // of `expected_size` bytes (-1: unknown; for the disk-full message). `on_written` gets each
  // block once it is on disk, in order, on a thread of its own (in Finish for a body shorter than
  // a block): the digest and progress follow it, so they never count bytes not on disk.
  // `last_change` is the file as the caller's own last change left it: before each write the file
  // must still be so, or the write is refused with DataLoss (another process changed it, so the
  // bytes handed to `on_written` are no longer the file's).
  PartWriter(std::string path, int fd, const FileStamp& last_change, int64_t start_offset,
             int64_t expected_size, std::function<void(absl::string_view)> on_written);
  ~PartWriter();
  PartWriter(const PartWriter&) = delete;
  PartWriter& operator=(const PartWriter&) = delete;

  // Takes `data`. A write error of an earlier block (disk full) comes back here, so that the
  // caller stops the transfer; after one, nothing more is written.
  absl::Status Append(absl::string_view data);
  // Writes what is still queued, passes it to `on_written`, stops the threads and returns the
  // first error; idempotent.
  absl::Status Finish();

  int64_t accepted() const { return accepted_; }  // bytes given to Append
  int64_t written() const { return written_; }    // bytes on disk; final after Finish
  // The file as this writer's last write left it (`last_change` before one); final after Finish.
  const FileStamp& stamp() const { return stamp_; }

 private:
  // Hands the filling block to the threads, starting them the first time.
  absl::Status Submit();
  void WriteLoop();
  void DigestLoop();
  // Refuses the block when the file is not as stamp_ says; else writes it and stamps the file.
  absl::Status WriteBlock(const std::vector<char>& block);
  // write() until all of `block` is written or one fails; `done` counts the bytes written.
  absl::Status WriteAll(const std::vector<char>& block, size_t* done);

  const std::string path_;
  const int fd_;
  const int64_t start_offset_;
  const int64_t expected_size_;
  const std::function<void(absl::string_view)> on_written_;
  int64_t accepted_ = 0;
  int64_t written_ = 0;  // only the write thread changes it while it runs
  FileStamp stamp_;      // likewise
  bool finished_ = false;
  std::vector<char> filling_;

  std::mutex mutex_;
  std::condition_variable changed_;
  // Full blocks, oldest first: the first `blocks_written_` are on disk and wait for on_written,
  // the rest wait to be written. A deque keeps references valid while the threads work unlocked.
  std::deque<std::vector<char>> queued_;
  size_t blocks_written_ = 0;
  std::vector<std::vector<char>> spare_;  // digested blocks kept for reuse
  absl::Status status_;                   // the first write error
  bool closing_ = false;                  // no more blocks will come
  bool writing_done_ = false;             // the write thread has stopped
  // Started with the first full block: small files need neither.
  std::thread write_thread_;
  std::thread digest_thread_;
};

}  // namespace titan

#endif  // TITAN_LIB_HUB_PART_WRITER_H_
