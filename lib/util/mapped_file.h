#ifndef TITAN_LIB_UTIL_MAPPED_FILE_H_
#define TITAN_LIB_UTIL_MAPPED_FILE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// A read-only private mapping of a whole regular file, unmapped when destroyed: readers of large
// weight files (safetensors, torch.save archives) take their bytes from it without copying.
class MappedFile {
 public:
  // An error names `path` (open, stat, mmap, or not a regular file); an empty file maps to no
  // bytes (mmap rejects length 0), for its reader to report.
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(const std::string& path);

  MappedFile(void* data, size_t size) : data_(data), size_(size) {}
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  absl::string_view bytes() const { return {static_cast<const char*>(data_), size_}; }

 private:
  void* data_;
  size_t size_;
};

}  // namespace titan

#endif  // TITAN_LIB_UTIL_MAPPED_FILE_H_
