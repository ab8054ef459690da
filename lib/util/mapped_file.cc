#include "lib/util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/status/status.h"
#include "lib/util/file_util.h"

namespace titan {

MappedFile::~MappedFile() {
  if (size_ > 0) ::munmap(data_, size_);
}

absl::StatusOr<std::shared_ptr<const MappedFile>> MappedFile::Open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever, before fstat refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoError("open", path);
  struct stat info;
  const bool stated = ::fstat(fd, &info) == 0;
  if (!stated || !S_ISREG(info.st_mode)) {
    absl::Status status = !stated ? ErrnoError("stat", path)
                                  : absl::InvalidArgumentError(path + ": not a regular file");
    ::close(fd);
    return status;
  }
  const size_t size = static_cast<size_t>(info.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      absl::Status status = ErrnoError("mmap", path);
      ::close(fd);
      return status;
    }
  }
  ::close(fd);
  return std::make_shared<const MappedFile>(data, size);
}

}  // namespace titan
