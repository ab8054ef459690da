#include "lib/hub/file_downloader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "lib/hub/content_digest.h"
#include "lib/hub/part_writer.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

constexpr int kMaxRedirects = 10;

std::string StripEtag(absl::string_view etag) {
  absl::ConsumePrefix(&etag, "W/");
  return std::string(absl::StripSuffix(absl::StripPrefix(etag, "\""), "\""));
}

bool IsSha256Hex(absl::string_view s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return absl::ascii_isdigit(c) || (c >= 'a' && c <= 'f');
         });
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// `record[key]` when it is an integer, else `fallback`: a record edited by hand or written by
// something else must not throw (json::value would, for a key of another type).
int64_t IntField(const nlohmann::json& record, const char* key, int64_t fallback) {
  const auto it = record.find(key);
  return it != record.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

// `record[key]` when it is a string, else `fallback`.
std::string StringField(const nlohmann::json& record, const char* key, std::string fallback) {
  const auto it = record.find(key);
  return it != record.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// A file's sidecar (WriteMeta) as parsed JSON: null when missing, discarded when it does not parse.
nlohmann::json ReadRecord(const std::string& meta_path) {
  absl::StatusOr<std::string> meta_text = ReadFile(meta_path);
  if (!meta_text.ok()) return nlohmann::json();
  return nlohmann::json::parse(*meta_text, nullptr, false);
}

// The sha256 that a sidecar `record` holds (learned from an ETag when the listing gave none);
// empty when there is none.
std::string RecordedSha256(const nlohmann::json& record) {
  const std::string digest = record.is_object() ? StringField(record, "digest", "") : "";
  return IsSha256Hex(digest) ? digest : "";
}

// Whether a sidecar `record` holds the size and mtime in `st` and `digest`.
bool MatchesRecord(const nlohmann::json& record, const struct stat& st, const std::string& digest) {
  return record.is_object() && IntField(record, "size", -2) == st.st_size &&
         IntField(record, "mtime_ns", -1) == MtimeNs(st) &&
         StringField(record, "digest", "") == digest;
}

// Parses "bytes START-END/TOTAL"; TOTAL is -1 when "*".
bool ParseContentRange(absl::string_view value, int64_t* start, int64_t* total) {
  if (!absl::ConsumePrefix(&value, "bytes ")) return false;
  const size_t dash = value.find('-');
  const size_t slash = value.find('/');
  if (dash == absl::string_view::npos || slash == absl::string_view::npos) return false;
  if (!absl::SimpleAtoi(value.substr(0, dash), start)) return false;
  const absl::string_view total_text = value.substr(slash + 1);
  if (total_text == "*") {
    *total = -1;
    return true;
  }
  return absl::SimpleAtoi(total_text, total);
}

// The total of a 416's "bytes */TOTAL", or -1 when absent or unparsable.
int64_t UnsatisfiedRangeTotal(const HttpResponse& response) {
  const auto range = response.headers.find("content-range");
  if (range == response.headers.end()) return -1;
  absl::string_view value = range->second;
  int64_t total = -1;
  if (!absl::ConsumePrefix(&value, "bytes */") || !absl::SimpleAtoi(value, &total)) return -1;
  return total;
}

// Not retryable: the same listing and server would disagree again on every attempt.
absl::Status SizeMismatch(int64_t listed, int64_t served) {
  return absl::FailedPreconditionError(
      absl::StrCat("size mismatch: the listing says ", listed, " bytes, the server has ", served));
}

// The note's tail for a server's Retry-After; empty when it gave none.
std::string RetryAfterNote(absl::Duration retry_after) {
  if (retry_after <= absl::ZeroDuration()) return "";
  return absl::StrCat("; waiting ", absl::FormatDuration(std::min(retry_after, kMaxRetryAfter)),
                      " as the server asks (Retry-After)");
}

}  // namespace

absl::Status CheckOutsideStateDir(absl::string_view repo_path) {
  // Whether `path` is `dir` or a path under it.
  const auto within = [](absl::string_view path, absl::string_view dir) {
    return absl::StartsWith(path, dir) && (path.size() == dir.size() || path[dir.size()] == '/');
  };
  const bool under = within(repo_path, kDownloadStateDir) && repo_path != kDownloadStateDir;
  // A file at the state folder or at one of its ancestors would keep it from being created.
  if (!under && !within(kDownloadStateDir, repo_path)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("repo file \"", repo_path, "\" would land in download_assets' own state folder ",
                   kDownloadStateDir, "; leave it out with --exclude='",
                   under ? absl::StrCat(kDownloadStateDir, "/*") : std::string(repo_path), "'"));
}

FileDownloader::FileDownloader(const DownloadOptions& options)
    : options_(options), random_(std::random_device{}()) {}

std::string FileDownloader::FinalPath(const std::string& path) const {
  return absl::StrCat(options_.local_dir, "/", path);
}

std::string FileDownloader::StatePath(absl::string_view name) const {
  return absl::StrCat(options_.local_dir, "/", kDownloadStateDir, "/", name);
}

std::string FileDownloader::PartPath(const std::string& path) const {
  return StatePath(path + ".part");
}

std::string FileDownloader::MetaPath(const std::string& path) const {
  return StatePath(path + ".meta.json");
}

std::string FileDownloader::PartRecordPath(const std::string& path) const {
  return StatePath(path + ".part.json");
}

std::string FileDownloader::ListingPath() const {
  return StatePath(
      absl::StrCat("revisions/", absl::StrReplaceAll(options_.revision, {{"/", "%2F"}}), ".json"));
}

HubRequestContext FileDownloader::Context(const std::string& path) const {
  return HubRequestContext{options_.endpoint, options_.repo_id, options_.revision, path,
                           !options_.token.empty()};
}

absl::StatusOr<HttpResponse> FileDownloader::GetFollowing(
    HttpClient& client, HttpRequest request,
    absl::flat_hash_map<std::string, std::string>* hub_headers) {
  const std::vector<std::string> base_headers = request.headers;
  for (int hop = 0; hop <= kMaxRedirects; ++hop) {
    request.headers = base_headers;
    if (!options_.token.empty() && SameOrigin(request.url, options_.endpoint)) {
      request.headers.push_back(absl::StrCat("Authorization: Bearer ", options_.token));
    }
    absl::StatusOr<HttpResponse> response = client.Get(request);
    if (!response.ok() || response->status < 300 || response->status >= 400) return response;
    if (hub_headers != nullptr) {
      for (const auto& [name, value] : response->headers) (*hub_headers)[name] = value;
    }
    if (response->redirect_url.empty()) {
      return absl::UnavailableError(
          absl::StrCat("HTTP ", response->status, " redirect without a Location"));
    }
    request.url = response->redirect_url;
  }
  return absl::FailedPreconditionError(absl::StrCat("more than ", kMaxRedirects, " redirects"));
}

void FileDownloader::Backoff(int failures, absl::Duration at_least) {
  const double base = absl::ToDoubleSeconds(options_.retry_base_delay);
  const double cap = absl::ToDoubleSeconds(options_.retry_max_delay);
  const double delay = std::min(cap, base * std::pow(2.0, std::max(0, failures - 1)));
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  double seconds;
  {
    std::lock_guard<std::mutex> lock(random_mutex_);
    seconds = delay * jitter(random_);
  }
  absl::SleepFor(std::max(absl::Seconds(seconds), std::min(at_least, kMaxRetryAfter)));
}

absl::StatusOr<std::string> FileDownloader::FetchListing(HttpClient& client) {
  HttpRequest request;
  request.url = RepoInfoUrl(options_.endpoint, options_.repo_id, options_.revision);
  request.connect_timeout = options_.connect_timeout;
  request.stall_timeout = options_.stall_timeout;
  for (int failures = 1;; ++failures) {
    absl::StatusOr<HttpResponse> response = GetFollowing(client, request, nullptr);
    absl::Status status;
    absl::Duration retry_after;
    if (!response.ok()) {
      status = response.status();
    } else if (response->status == 200) {
      return std::move(response->body);
    } else {
      status = HubHttpError(response->status, response->headers["x-error-code"],
                            response->headers["x-error-message"], Context(""));
      retry_after = RetryAfter(*response, absl::Now());
    }
    if (!IsRetryable(status) || failures > options_.max_retries) return status;
    Note("listing",
         absl::StrCat("retry ", failures, ": ", status.message(), RetryAfterNote(retry_after)));
    Backoff(failures, retry_after);
  }
}

bool FileDownloader::IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

void FileDownloader::Note(const std::string& path, const std::string& message) {
  if (progress_ != nullptr) {
    progress_->Note(path, message);
  } else if (options_.progress_out != nullptr) {  // before any transfer: the listing's retries
    std::fprintf(options_.progress_out, "%s: %s\n", path.c_str(), message.c_str());
  }
}

void FileDownloader::Warn(const std::string& path, const std::string& message) {
  if (progress_ != nullptr) {
    progress_->Note(path, message);
  } else if (options_.warning_out != nullptr) {
    std::fprintf(options_.warning_out, "%s: %s\n", path.c_str(), message.c_str());
  }
}

absl::Status FileDownloader::CheckInPlace(const RemoteFile& file, std::string* warning) {
  const std::string final_path = FinalPath(file.path);
  struct stat st;
  if (::stat(final_path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(final_path, " is missing"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(final_path, " is not a regular file"));
  }
  if (file.size >= 0 && st.st_size != file.size) {
    return absl::FailedPreconditionError(
        absl::StrCat(final_path, " has ", st.st_size, " bytes, the listing says ", file.size));
  }
  const nlohmann::json record = ReadRecord(MetaPath(file.path));  // read once, for both checks
  ContentDigest digest(file);
  if (!digest.enabled()) {
    // The sha256 that the server's ETag gave when it was downloaded still checks it.
    if (const std::string recorded = RecordedSha256(record); !recorded.empty()) {
      digest.ExpectSha256(recorded);
    }
  }
  if (!options_.verify && MatchesRecord(record, st, digest.expected())) return absl::OkStatus();
  if (!digest.enabled()) {
    if (file.size >= 0) {
      if (options_.verify) {
        const std::string unverified =
            "not verified: neither the listing nor its record gives a sha256 or git blob id for "
            "--verify to hash it by; only its size was checked";
        Warn(file.path, unverified);
        if (warning != nullptr) *warning = unverified;
      }
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        final_path, ": the listing gives neither a size nor a digest to check it against"));
  }
  if (absl::Status status = HashPrefix(final_path, st.st_size, &digest); !status.ok()) {
    return status;
  }
  if (const std::string actual = digest.Finish(); actual != digest.expected()) {
    Note(file.path, absl::StrCat("the file on disk does not verify: ", digest.name(), " expected ",
                                 digest.expected(), ", got ", actual));
    const absl::Status mismatch =
        absl::DataLossError(absl::StrCat(final_path, ": ", digest.name(), " mismatch: expected ",
                                         digest.expected(), ", got ", actual));
    return DropRecord(file, mismatch);
  }
  return WriteMeta(file, digest.expected());
}

absl::Status FileDownloader::DropRecord(const RemoteFile& file, const absl::Status& why) {
  const std::string meta_path = MetaPath(file.path);
  if (::unlink(meta_path.c_str()) == 0 || errno == ENOENT) return why;
  const absl::Status unlink_error = ErrnoError("unlink", meta_path);
  return absl::Status(why.code(),
                      absl::StrCat(why.message(), "; its record stays: ", unlink_error.message()));
}

absl::Status FileDownloader::WriteMeta(const RemoteFile& file, const std::string& digest) {
  struct stat st;
  const std::string final_path = FinalPath(file.path);
  if (::stat(final_path.c_str(), &st) != 0) return ErrnoError("stat", final_path);
  const nlohmann::json meta = {{"path", file.path},       {"size", st.st_size},
                               {"mtime_ns", MtimeNs(st)}, {"digest", digest},
                               {"commit", commit_},       {"repo_id", options_.repo_id}};
  const std::string meta_path = MetaPath(file.path);
  if (absl::Status status = MakeDirectories(Dirname(meta_path)); !status.ok()) return status;
  return WriteFileAtomically(meta_path, meta.dump(2) + "\n");
}

bool FileDownloader::PartIsFor(const RemoteFile& file) const {
  absl::StatusOr<std::string> text = ReadFile(PartRecordPath(file.path));
  if (!text.ok()) return true;
  const nlohmann::json record = nlohmann::json::parse(*text, nullptr, false);
  return record.is_object() && IntField(record, "size", -2) == file.size &&
         StringField(record, "digest", "?") == ContentDigest(file).expected();
}

absl::Status FileDownloader::TiePartToContent(const RemoteFile& file) {
  const std::string part_path = PartPath(file.path);
  if (PathExists(part_path) && !PartIsFor(file)) {
    if (::unlink(part_path.c_str()) != 0) return ErrnoError("unlink", part_path);
    Note(file.path, "the part file holds another version of the file; starting over");
  }
  const nlohmann::json record = {{"digest", ContentDigest(file).expected()}, {"size", file.size}};
  return WriteFileAtomically(PartRecordPath(file.path), record.dump() + "\n");
}

int64_t FileDownloader::PartSize(const RemoteFile& file) const {
  struct stat st;
  if (!PartIsFor(file) || ::stat(PartPath(file.path).c_str(), &st) != 0) return 0;
  return file.size >= 0 ? std::min<int64_t>(st.st_size, file.size) : st.st_size;
}

FileReport FileDownloader::DownloadFile(HttpClient& client, const RemoteFile& remote) {
  RemoteFile file = remote;
  FileReport report{file.path, file.size};
  const auto fail = [&](const absl::Status& status) {
    report.outcome = FileOutcome::kFailed;
    report.error = std::string(status.message());
    if (progress_ != nullptr) progress_->Finish(file.path, absl::StrCat("FAILED: ", report.error));
    return report;
  };
  const std::string part_path = PartPath(file.path);
  const std::string final_path = FinalPath(file.path);
  for (const std::string& dir : {Dirname(part_path), Dirname(final_path)}) {
    if (absl::Status status = MakeDirectories(dir); !status.ok()) return fail(status);
  }
  if (absl::Status status = TiePartToContent(file); !status.ok()) return fail(status);
  ContentDigest digest(file);
  int verify_failures = 0;
  int failures_without_progress = 0;
  // Progress is a byte never reached before: a server that cuts every transfer at one byte and
  // answers 416 past it sends the same bytes again without getting further.
  int64_t furthest_offset = -1;
  bool started = false;
  // The part file as this run's own last change left it (none before this run opened it): the
  // digest hashes the bytes as they are written, so it is the file's only while nothing else
  // changed the file since.
  std::optional<FileStamp> own;
  // Deletes a part file that does not hold what was counted; false the second time (give up).
  const auto drop_part = [&](const absl::Status& why) {
    ::unlink(part_path.c_str());
    own.reset();
    digest.Reset();
    if (++verify_failures >= 2) return false;
    ++report.retries;
    Note(file.path, absl::StrCat(why.message(), "; deleted the part file"));
    if (progress_ != nullptr) progress_->Rewind(file.path, 0);
    return true;
  };
  while (true) {
    const int fd = ::open(part_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return fail(ErrnoError("open", part_path));
    // Records a change this run made to the part file (creating, truncating, writing it).
    const auto own_change = [&]() -> absl::Status {
      absl::StatusOr<FileStamp> now = FileStamp::OfFd(fd, part_path);
      if (!now.ok()) return now.status();
      own = *now;
      return absl::OkStatus();
    };
    absl::StatusOr<FileStamp> opened = FileStamp::OfFd(fd, part_path);
    if (!opened.ok()) {
      ::close(fd);
      return fail(opened.status());
    }
    if (const std::string change = own.has_value() ? ChangeSince(*own, *opened) : "";
        !change.empty()) {  // by something else, during the backoff between two attempts
      ::close(fd);
      const absl::Status why = absl::DataLossError(
          absl::StrCat(part_path, ": the part file ", change, " between two attempts"));
      if (!drop_part(why)) return fail(why);
      continue;
    }
    int64_t offset = opened->size;
    if (file.size >= 0 && offset > file.size) {
      if (::ftruncate(fd, 0) != 0) {
        ::close(fd);
        return fail(ErrnoError("truncate", part_path));
      }
      offset = 0;
    }
    if (absl::Status status = own_change(); !status.ok()) {
      ::close(fd);
      return fail(status);
    }
    if (digest.bytes() != offset) {
      digest.Reset();
      if (absl::Status status = HashPrefix(part_path, offset, &digest); !status.ok()) {
        ::close(fd);
        return fail(status);
      }
    }
    if (!started && progress_ != nullptr) progress_->Start(file.path, file.size, offset);
    started = true;
    const int64_t offset_at_attempt = offset;
    absl::Status attempt_status;
    absl::Duration retry_after;
    if (file.size < 0 || offset < file.size) {
      // Made with the first body byte, once the headers have settled the offset and size.
      std::optional<PartWriter> writer;
      absl::flat_hash_map<std::string, std::string> hub_headers;
      HttpRequest request;
      request.url = ResolveUrl(options_.endpoint, options_.repo_id,
                               commit_.empty() ? options_.revision : commit_, file.path);
      request.connect_timeout = options_.connect_timeout;
      request.stall_timeout = options_.stall_timeout;
      if (offset > 0) request.headers.push_back(absl::StrCat("Range: bytes=", offset, "-"));
      request.on_headers = [&](const HttpResponse& response) -> absl::Status {
        if (!digest.enabled()) {
          // The X-Linked-Etag of a redirect, or of the reply itself: a mirror may serve an LFS
          // file without redirecting (huggingface_hub reads it from the final response).
          const std::pair<const absl::flat_hash_map<std::string, std::string>*, const char*>
              sources[] = {{&hub_headers, "x-linked-etag"},
                           {&response.headers, "x-linked-etag"},
                           {&hub_headers, "etag"}};
          for (const auto& [headers, name] : sources) {
            const auto it = headers->find(name);
            const std::string etag = it == headers->end() ? "" : StripEtag(it->second);
            if (IsSha256Hex(etag)) {
              digest.ExpectSha256(etag);
              // Then on: the reply may still ignore Range or answer from another byte.
              if (absl::Status status = HashPrefix(part_path, offset, &digest); !status.ok()) {
                return status;
              }
              break;
            }
          }
        }
        const auto range = response.headers.find("content-range");
        if (response.status == 206 && range != response.headers.end()) {
          int64_t start = -1;
          int64_t total = -1;
          if (!ParseContentRange(range->second, &start, &total)) {
            return absl::UnavailableError(absl::StrCat("server answered Range bytes=", offset,
                                                       "- with Content-Range ", range->second));
          }
          if (start != offset) {
            // A reply from an earlier byte than asked (the whole file as 206 from 0) is written
            // from that byte; one from a later byte would leave a gap: start over without Range.
            const int64_t requested = offset;
            offset = start < offset ? start : 0;
            if (::ftruncate(fd, offset) != 0) return ErrnoError("truncate", part_path);
            if (absl::Status status = own_change(); !status.ok()) return status;
            digest.Reset();
            if (absl::Status status = HashPrefix(part_path, offset, &digest); !status.ok()) {
              return status;
            }
            if (progress_ != nullptr) progress_->Rewind(file.path, offset);
            if (start > requested) {
              return absl::UnavailableError(absl::StrCat("server answered Range bytes=", requested,
                                                         "- with Content-Range ", range->second,
                                                         "; starting over"));
            }
          }
          if (file.size < 0) file.size = total;
          if (total >= 0 && total != file.size) return SizeMismatch(file.size, total);
          return absl::OkStatus();
        }
        if (offset > 0) {  // the server ignored Range: start over
          if (::ftruncate(fd, 0) != 0) return ErrnoError("truncate", part_path);
          if (absl::Status status = own_change(); !status.ok()) return status;
          offset = 0;
          digest.Reset();
          if (progress_ != nullptr) progress_->Rewind(file.path, 0);
        }
        const auto length = response.headers.find("content-length");
        int64_t content_length = -1;
        if (length == response.headers.end() ||
            !absl::SimpleAtoi(length->second, &content_length) ||
            response.headers.contains("content-encoding")) {
          return absl::OkStatus();  // an encoded body's length is not the file's
        }
        if (file.size < 0) file.size = content_length;
        if (content_length != file.size) return SizeMismatch(file.size, content_length);
        return absl::OkStatus();
      };
      request.on_body = [&](absl::string_view data) -> absl::Status {
        if (!writer.has_value()) {
          writer.emplace(part_path, fd, *own, offset, file.size, [&](absl::string_view written) {
            digest.Update(written);
            if (progress_ != nullptr) {
              progress_->Advance(file.path, static_cast<int64_t>(written.size()));
            }
          });
        }
        if (file.size >= 0 &&
            offset + writer->accepted() + static_cast<int64_t>(data.size()) > file.size) {
          return absl::DataLossError(absl::StrCat(file.path, ": server sent more than the ",
                                                  file.size, " bytes the listing gives"));
        }
        return writer->Append(data);
      };
      absl::StatusOr<HttpResponse> response = GetFollowing(client, request, &hub_headers);
      absl::Status write_status;
      if (writer.has_value()) {
        write_status = writer->Finish();
        own = writer->stamp();
        offset += writer->written();
        report.bytes_fetched += writer->written();
      }
      if (!write_status.ok()) {
        attempt_status = write_status;
      } else if (!response.ok()) {
        attempt_status = response.status();
      } else if (const int64_t total = UnsatisfiedRangeTotal(*response);
                 response->status == 416 && total >= 0 && file.size >= 0 && total != file.size) {
        attempt_status = SizeMismatch(file.size, total);
      } else if (response->status == 416) {
        if (::ftruncate(fd, 0) != 0) {
          attempt_status = ErrnoError("truncate", part_path);
        } else if (absl::Status status = own_change(); !status.ok()) {
          attempt_status = status;
        } else {
          attempt_status = absl::UnavailableError(
              "HTTP 416: the part file does not fit the "
              "remote file; starting over");
          digest.Reset();
          if (progress_ != nullptr) progress_->Rewind(file.path, 0);
        }
      } else if (response->status < 200 || response->status >= 300) {
        attempt_status = HubHttpError(response->status, response->headers["x-error-code"],
                                      response->headers["x-error-message"], Context(file.path));
        retry_after = RetryAfter(*response, absl::Now());
      } else if (file.size >= 0 && offset < file.size) {
        attempt_status = absl::UnavailableError(
            absl::StrCat("connection ended at byte ", offset, " of ", file.size));
      }
    }
    if (attempt_status.ok()) {
      const int sync_rc = ::fsync(fd);
      if (::close(fd) != 0 || sync_rc != 0) return fail(ErrnoError("fsync", part_path));
    } else {
      ::close(fd);
    }
    if (absl::IsDataLoss(attempt_status)) {
      if (!drop_part(attempt_status)) return fail(attempt_status);
      continue;
    }
    if (!attempt_status.ok()) {
      if (!IsRetryable(attempt_status)) return fail(attempt_status);
      const bool progressed = offset > offset_at_attempt && offset > furthest_offset;
      failures_without_progress = progressed ? 1 : failures_without_progress + 1;
      furthest_offset = std::max(furthest_offset, offset);
      if (failures_without_progress > options_.max_retries) {
        return fail(absl::Status(
            attempt_status.code(),
            absl::StrCat(attempt_status.message(), " (gave up after ", options_.max_retries,
                         " retries without progress; re-run to resume)")));
      }
      ++report.retries;
      Note(file.path, absl::StrCat("retry ", report.retries, " at byte ", offset, ": ",
                                   attempt_status.message(), RetryAfterNote(retry_after)));
      Backoff(failures_without_progress, retry_after);
      continue;
    }
    // About the file that rename publishes, not the bytes counted: the digest hashed the bytes
    // as they were written, so the part file must still be as this run's last change left it
    // (another process's append, truncation, replacement or same-size rewrite moves its stamp).
    struct stat on_disk;
    if (::stat(part_path.c_str(), &on_disk) != 0) return fail(ErrnoError("stat", part_path));
    const std::string changed = ChangeSince(*own, FileStamp::Of(on_disk));
    const int64_t expected_size = file.size >= 0 ? file.size : offset;
    const std::string actual = digest.enabled() ? digest.Finish() : "";
    if (actual != digest.expected() || !changed.empty() || offset != expected_size ||
        on_disk.st_size != expected_size) {
      ::unlink(part_path.c_str());
      own.reset();
      std::string mismatch;
      if (!changed.empty()) {  // first: the bytes hashed and counted are not the file's
        mismatch = absl::StrCat("the part file ", changed, " during the download");
      } else if (actual != digest.expected()) {
        mismatch = absl::StrCat(digest.name(), " mismatch: expected ", digest.expected(), ", got ",
                                actual);
      } else {
        mismatch =
            absl::StrCat("size mismatch: expected ", expected_size, " bytes, the part file has ",
                         on_disk.st_size,
                         on_disk.st_size == offset ? "" : absl::StrCat(" (", offset, " received)"));
      }
      digest.Reset();
      if (++verify_failures >= 2) {
        return fail(absl::DataLossError(absl::StrCat(
            file.path, ": ", mismatch, " (downloaded twice; the part file was deleted)")));
      }
      ++report.retries;
      Note(file.path, absl::StrCat(mismatch, "; deleted the part file, downloading again"));
      if (progress_ != nullptr) progress_->Rewind(file.path, 0);
      continue;
    }
    if (::rename(part_path.c_str(), final_path.c_str()) != 0) {
      return fail(ErrnoError(absl::StrCat("rename to ", final_path), part_path));
    }
    if (absl::Status status = FsyncDirectory(Dirname(final_path)); !status.ok()) {
      return fail(status);
    }
    ::unlink(PartRecordPath(file.path).c_str());  // its part file is gone
    if (absl::Status status = WriteMeta(file, digest.expected()); !status.ok()) {
      return fail(status);
    }
    report.size = file.size;
    report.outcome = FileOutcome::kDownloaded;
    if (!digest.enabled()) {
      report.warning = absl::StrCat(
          "not verified: neither the listing nor the server gives a sha256 or git blob id for it; ",
          file.size >= 0 ? "only its size was checked" : "nor a size: nothing was checked");
      Warn(file.path, report.warning);
    }
    if (progress_ != nullptr) {
      progress_->Finish(file.path, digest.enabled() ? "done, verified" : "done, NOT verified");
    }
    return report;
  }
}

}  // namespace titan
