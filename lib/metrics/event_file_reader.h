#ifndef TITAN_LIB_METRICS_EVENT_FILE_READER_H_
#define TITAN_LIB_METRICS_EVENT_FILE_READER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/metrics/event.pb.h"

namespace titan {

// Splits TFRecord-framed bytes into payloads; a short record or a CRC mismatch is an error naming
// the byte offset. Tests use it to check what TensorBoardWriter wrote.
absl::StatusOr<std::vector<std::string>> DecodeTfRecords(absl::string_view contents);

// Reads every Event of a TensorBoard event file.
absl::StatusOr<std::vector<tensorboard::Event>> ReadEventFile(const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_METRICS_EVENT_FILE_READER_H_
