#ifndef TITAN_LIB_UTIL_GZIP_FILE_H_
#define TITAN_LIB_UTIL_GZIP_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace titan {

// Compresses `from` into `to` (gzip, written atomically: on disk before `from` is removed).
absl::Status GzipFile(const std::string& from, const std::string& to);

// A whole file, decompressed when it is gzip (zlib tells by its header, whatever the name).
absl::StatusOr<std::string> ReadPlainOrGzipFile(const std::string& path);

}  // namespace titan

#endif  // TITAN_LIB_UTIL_GZIP_FILE_H_
