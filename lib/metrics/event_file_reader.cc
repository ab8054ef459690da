#include "lib/metrics/event_file_reader.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/metrics/crc32c.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

uint64_t ReadLittleEndian(absl::string_view bytes, int num_bytes) {
  uint64_t value = 0;
  for (int i = 0; i < num_bytes; ++i) {
    value |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  }
  return value;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> DecodeTfRecords(absl::string_view contents) {
  std::vector<std::string> records;
  size_t offset = 0;
  while (offset < contents.size()) {
    if (contents.size() - offset < 12) {
      return absl::DataLossError(absl::StrCat("record at byte ", offset, ": truncated header"));
    }
    const absl::string_view length_bytes = contents.substr(offset, 8);
    if (ReadLittleEndian(contents.substr(offset + 8), 4) != MaskedCrc32c(length_bytes)) {
      return absl::DataLossError(absl::StrCat("record at byte ", offset, ": bad length CRC"));
    }
    const uint64_t length = ReadLittleEndian(length_bytes, 8);
    if (contents.size() - offset - 12 < length + 4) {
      return absl::DataLossError(absl::StrCat("record at byte ", offset, ": expected ", length,
                                              " data bytes and a CRC, file ends first"));
    }
    const absl::string_view data = contents.substr(offset + 12, length);
    if (ReadLittleEndian(contents.substr(offset + 12 + length), 4) != MaskedCrc32c(data)) {
      return absl::DataLossError(absl::StrCat("record at byte ", offset, ": bad data CRC"));
    }
    records.emplace_back(data);
    offset += 16 + length;
  }
  return records;
}

absl::StatusOr<std::vector<tensorboard::Event>> ReadEventFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFile(path);
  if (!contents.ok()) return contents.status();
  absl::StatusOr<std::vector<std::string>> records = DecodeTfRecords(*contents);
  if (!records.ok()) return absl::DataLossError(absl::StrCat(path, ": ", records.status().message()));
  std::vector<tensorboard::Event> events(records->size());
  for (size_t i = 0; i < records->size(); ++i) {
    if (!events[i].ParseFromString((*records)[i])) {
      return absl::DataLossError(absl::StrCat(path, ": record ", i, " is not an Event"));
    }
  }
  return events;
}

}  // namespace titan
