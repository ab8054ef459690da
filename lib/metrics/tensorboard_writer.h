#ifndef TITAN_LIB_METRICS_TENSORBOARD_WRITER_H_
#define TITAN_LIB_METRICS_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace titan {

// Frames one record the TFRecord way: little-endian uint64 length, masked CRC-32C of those 8
// bytes, the data, masked CRC-32C of the data.
std::string EncodeTfRecord(absl::string_view data);

// Writes TensorBoard event files natively (no TensorFlow, no Python): scalars only.
class TensorBoardWriter {
 public:
  // Creates `log_dir` (and parents) if missing and opens
  // `<log_dir>/events.out.tfevents.<unix-seconds>.<hostname>`, whose first record is the
  // "brain.Event:2" file-version event. An existing file of that name is appended to.
  // `purge_step` >= 0 (a resumed run's first step): TensorBoard hides the points earlier files
  // hold at that step and after, which the resumed run logs again (PyTorch's purge_step).
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Create(const std::string& log_dir,
                                                                   int64_t purge_step = -1);

  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  // Flushes and closes the file.
  ~TensorBoardWriter();

  // Appends one Event holding a single simple_value summary, stamped with `logged_at`: the current
  // wall time unless the point waited (a restart's, written at its first save).
  absl::Status AddScalar(absl::string_view tag, float value, int64_t step,
                         absl::Time logged_at = absl::Now());

  // Pushes buffered records to the OS so TensorBoard (or a crash) sees them.
  absl::Status Flush();

  // The event file's path.
  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}

  absl::Status WriteRecord(absl::string_view data);

  std::string path_;
  std::FILE* file_;
};

}  // namespace titan

#endif  // TITAN_LIB_METRICS_TENSORBOARD_WRITER_H_
