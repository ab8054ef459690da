#include "lib/metrics/tensorboard_writer.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "lib/metrics/crc32c.h"
#include "lib/metrics/event.pb.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

void AppendLittleEndian(uint64_t value, int num_bytes, std::string* out) {
  for (int i = 0; i < num_bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

double WallTimeSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

absl::StatusOr<std::string> HostName() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) {
    return absl::InternalError(absl::StrCat("gethostname failed: ", std::strerror(errno)));
  }
  return std::string(name);
}

}  // namespace

std::string EncodeTfRecord(absl::string_view data) {
  std::string length;
  AppendLittleEndian(data.size(), 8, &length);
  std::string record;
  record.reserve(data.size() + 16);
  record.append(length);
  AppendLittleEndian(MaskedCrc32c(length), 4, &record);
  record.append(data.data(), data.size());
  AppendLittleEndian(MaskedCrc32c(data), 4, &record);
  return record;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Create(
    const std::string& log_dir, int64_t purge_step) {
  if (absl::Status made = MakeDirectories(log_dir); !made.ok()) {
    return absl::Status(made.code(),
                        absl::StrCat("cannot create the TensorBoard folder: ", made.message()));
  }
  absl::StatusOr<std::string> host = HostName();
  if (!host.ok()) return host.status();
  // As torch's SummaryWriter names them (time, host, pid, a count in the process): no two writers
  // share a file, which the x (O_EXCL) makes sure of; e: O_CLOEXEC.
  static std::atomic<int> files_made{0};
  const std::string path =
      absl::StrCat(log_dir, "/events.out.tfevents.", absl::ToUnixSeconds(absl::Now()), ".", *host,
                   ".", ::getpid(), ".", files_made++);
  std::FILE* file = std::fopen(path.c_str(), "wxe");
  if (file == nullptr) return ErrnoError("create", path);
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path, file));

  tensorboard::Event event;
  event.set_wall_time(WallTimeSeconds());
  event.set_file_version("brain.Event:2");
  absl::Status status = writer->WriteRecord(event.SerializeAsString());
  if (status.ok() && purge_step >= 0) {
    tensorboard::Event start;
    start.set_wall_time(WallTimeSeconds());
    start.set_step(purge_step);
    start.mutable_session_log()->set_status(tensorboard::SessionLog::START);
    status = writer->WriteRecord(start.SerializeAsString());
  }
  if (status.ok()) status = writer->Flush();
  if (!status.ok()) return status;
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() { std::fclose(file_); }

absl::Status TensorBoardWriter::AddScalar(absl::string_view tag, float value, int64_t step,
                                          absl::Time logged_at) {
  tensorboard::Event event;
  event.set_wall_time(absl::ToDoubleSeconds(logged_at - absl::UnixEpoch()));
  event.set_step(step);
  tensorboard::Summary::Value* summary_value = event.mutable_summary()->add_value();
  summary_value->set_tag(std::string(tag));
  summary_value->set_simple_value(value);
  return WriteRecord(event.SerializeAsString());
}

absl::Status TensorBoardWriter::Flush() {
  if (std::fflush(file_) != 0) return ErrnoError("flush", path_);
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::WriteRecord(absl::string_view data) {
  const std::string record = EncodeTfRecord(data);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    return ErrnoError("write", path_);
  }
  return absl::OkStatus();
}

}  // namespace titan
