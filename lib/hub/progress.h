#ifndef TITAN_LIB_HUB_PROGRESS_H_
#define TITAN_LIB_HUB_PROGRESS_H_

// Download progress for people: one bar per active file plus a total on a terminal, plain lines
// (start, retry, done, a periodic total) otherwise. Thread-safe.

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/time.h"

namespace titan {

// "1.5 GiB", "12.0 MiB", "512 B".
std::string HumanBytes(int64_t bytes);

class ProgressReporter {
 public:
  // Writes to `out` (not owned); `terminal` selects bars over plain lines. `total_bytes` is what
  // this run will fetch; Rewind adds the bytes on disk it discards.
  ProgressReporter(FILE* out, bool terminal, int64_t total_bytes);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // A file starts with `done` of its `size` bytes already on disk (a resumed part file).
  void Start(const std::string& path, int64_t size, int64_t done);
  // `bytes` more arrived for `path`.
  void Advance(const std::string& path, int64_t bytes);
  // The bytes of `path` restart from `done` (a server ignored Range, or a bad part was deleted).
  void Rewind(const std::string& path, int64_t done);
  // A line for the user about `path` (a retry, a warning).
  void Note(const std::string& path, const std::string& message);
  // `path` is finished; `summary` says how ("done", "FAILED: ...").
  void Finish(const std::string& path, const std::string& summary);
  // Stops the drawing thread and prints the final total; idempotent.
  void Close();

 private:
  struct FileState {
    int64_t size = 0;
    int64_t done = 0;
    int64_t at_start = 0;  // bytes on disk when this run started the file
    absl::Time started;
  };

  void DrawLoop();
  // Everything below runs with mutex_ held.
  void PrintLine(const std::string& line);
  void EraseBars();
  void DrawBars();
  std::string TotalLine() const;

  FILE* const out_;
  const bool terminal_;
  int64_t total_bytes_;  // grows when a file restarts below what was on disk at its start
  const absl::Time started_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool closed_ = false;
  std::map<std::string, FileState> active_;
  int64_t fetched_ = 0;    // bytes received by this run
  int64_t rewound_ = 0;    // bytes received and then thrown away
  int drawn_lines_ = 0;    // bar lines on screen below the log
  std::thread drawer_;
};

}  // namespace titan

#endif  // TITAN_LIB_HUB_PROGRESS_H_
