#include "lib/hub/hub_client.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "lib/hub/http_client.h"
#include "lib/hub/part_writer.h"
#include "lib/hub/progress.h"
#include "lib/util/file_util.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

constexpr int kMaxRedirects = 10;
constexpr char kStateDir[] = ".cache/download_assets";

// Incremental digest of a file as the Hub states it: sha256 of the content for LFS files, the
// git blob id (sha1 of "blob <size>\0" + content) for the others.
class ContentDigest {
 public:
  explicit ContentDigest(const RemoteFile& file)
      : expected_(file.sha256.empty() ? file.git_sha1 : file.sha256),
        git_blob_(file.sha256.empty() && !file.git_sha1.empty()),
        size_(file.size),
        context_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    Reset();
  }

  bool enabled() const { return !expected_.empty(); }
  const std::string& expected() const { return expected_; }
  const char* name() const { return git_blob_ ? "git blob sha1" : "sha256"; }
  int64_t bytes() const { return bytes_; }

  // An LFS oid learned from the response when the listing had none.
  void ExpectSha256(const std::string& sha256) {
    expected_ = sha256;
    git_blob_ = false;
    Reset();
  }

  void Reset() {
    bytes_ = 0;
    if (!enabled()) return;
    EVP_DigestInit_ex(context_.get(), git_blob_ ? EVP_sha1() : EVP_sha256(), nullptr);
    if (git_blob_) {
      const std::string header = absl::StrCat("blob ", size_);
      EVP_DigestUpdate(context_.get(), header.c_str(), header.size() + 1);  // with its NUL
    }
  }

  void Update(absl::string_view data) {
    bytes_ += static_cast<int64_t>(data.size());
    if (enabled()) EVP_DigestUpdate(context_.get(), data.data(), data.size());
  }

  std::string Finish() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(context_.get(), digest, &length);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned int i = 0; i < length; ++i) {
      hex.push_back(kHex[digest[i] >> 4]);
      hex.push_back(kHex[digest[i] & 15]);
    }
    return hex;
  }

 private:
  std::string expected_;
  bool git_blob_;
  int64_t size_;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context_;
  int64_t bytes_ = 0;
};

std::string Dirname(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
}

absl::Status MakeDirs(const std::string& dir) {
  std::string prefix;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      prefix = dir.substr(0, i);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return ErrnoError("mkdir", prefix);
      }
    }
  }
  return absl::OkStatus();
}

// Feeds the first `length` bytes of `path` to `digest` (a part file left by an earlier run).
absl::Status HashPrefix(const std::string& path, int64_t length, ContentDigest* digest) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return ErrnoError("open", path);
  std::vector<char> buffer(1 << 20);
  while (digest->bytes() < length) {
    const ssize_t n = ::read(fd, buffer.data(),
                             std::min<int64_t>(buffer.size(), length - digest->bytes()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status status = n < 0 ? ErrnoError("read", path)
                                  : absl::DataLossError(absl::StrCat(path, ": shorter than ",
                                                                     length, " bytes"));
      ::close(fd);
      return status;
    }
    digest->Update(absl::string_view(buffer.data(), n));
  }
  ::close(fd);
  return absl::OkStatus();
}

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

// One run's shared state; each worker thread owns its HttpClient.
class Downloader {
 public:
  explicit Downloader(const DownloadOptions& options)
      : options_(options), random_(std::random_device{}()) {}

  std::string FinalPath(const std::string& path) const {
    return absl::StrCat(options_.local_dir, "/", path);
  }
  std::string StatePath(absl::string_view name) const {
    return absl::StrCat(options_.local_dir, "/", kStateDir, "/", name);
  }
  std::string PartPath(const std::string& path) const { return StatePath(path + ".part"); }
  std::string MetaPath(const std::string& path) const { return StatePath(path + ".meta.json"); }
  std::string ListingPath() const {
    return StatePath(absl::StrCat("revisions/",
                                  absl::StrReplaceAll(options_.revision, {{"/", "%2F"}}),
                                  ".json"));
  }

  HubRequestContext Context(const std::string& path) const {
    return HubRequestContext{options_.endpoint, options_.repo_id, options_.revision, path,
                             !options_.token.empty()};
  }

  // GET that follows redirects; Authorization goes only to the Hub endpoint's origin. Headers
  // that the Hub puts on its redirect (X-Linked-Etag …) are merged into `hub_headers`.
  absl::StatusOr<HttpResponse> GetFollowing(HttpClient& client, HttpRequest request,
                                            absl::flat_hash_map<std::string, std::string>*
                                                hub_headers) {
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
        return absl::UnavailableError(absl::StrCat("HTTP ", response->status,
                                                   " redirect without a Location"));
      }
      request.url = response->redirect_url;
    }
    return absl::FailedPreconditionError(absl::StrCat("more than ", kMaxRedirects, " redirects"));
  }

  void Backoff(int failures) {
    const double base = absl::ToDoubleSeconds(options_.retry_base_delay);
    const double cap = absl::ToDoubleSeconds(options_.retry_max_delay);
    const double delay = std::min(cap, base * std::pow(2.0, std::max(0, failures - 1)));
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    double seconds;
    {
      std::lock_guard<std::mutex> lock(random_mutex_);
      seconds = delay * jitter(random_);
    }
    absl::SleepFor(absl::Seconds(seconds));
  }

  absl::StatusOr<std::string> FetchListing(HttpClient& client) {
    HttpRequest request;
    request.url = RepoInfoUrl(options_.endpoint, options_.repo_id, options_.revision);
    request.connect_timeout = options_.connect_timeout;
    request.stall_timeout = options_.stall_timeout;
    for (int failures = 1;; ++failures) {
      absl::StatusOr<HttpResponse> response = GetFollowing(client, request, nullptr);
      absl::Status status;
      if (!response.ok()) {
        status = response.status();
      } else if (response->status == 200) {
        return std::move(response->body);
      } else {
        status = HubHttpError(response->status, response->headers["x-error-code"],
                              response->headers["x-error-message"], Context(""));
      }
      if (!IsRetryable(status) || failures > options_.max_retries) return status;
      Note("listing", absl::StrCat("retry ", failures, ": ", status.message()));
      Backoff(failures);
    }
  }

  static bool IsRetryable(const absl::Status& status) {
    return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
  }

  void Note(const std::string& path, const std::string& message) {
    if (progress_ != nullptr) progress_->Note(path, message);
  }

  // True when `file` is already in place: size and mtime match the sidecar written when it was
  // verified, or, lacking one, its content hashes to the expected digest.
  bool IsUpToDate(const RemoteFile& file) {
    const std::string final_path = FinalPath(file.path);
    struct stat st;
    if (::stat(final_path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
    if (file.size >= 0 && st.st_size != file.size) return false;
    ContentDigest digest(file);
    absl::StatusOr<std::string> meta_text = ReadFile(MetaPath(file.path));
    if (meta_text.ok()) {
      const nlohmann::json meta = nlohmann::json::parse(*meta_text, nullptr, false);
      if (meta.is_object() && meta.value("size", int64_t{-2}) == st.st_size &&
          meta.value("mtime_ns", int64_t{-1}) == MtimeNs(st) &&
          meta.value("digest", std::string()) == digest.expected()) {
        return true;
      }
    }
    if (!digest.enabled()) return file.size >= 0;
    if (!HashPrefix(final_path, st.st_size, &digest).ok()) return false;
    if (digest.Finish() != digest.expected()) return false;
    return WriteMeta(file, digest.expected()).ok();
  }

  absl::Status WriteMeta(const RemoteFile& file, const std::string& digest) {
    struct stat st;
    const std::string final_path = FinalPath(file.path);
    if (::stat(final_path.c_str(), &st) != 0) return ErrnoError("stat", final_path);
    const nlohmann::json meta = {{"path", file.path},       {"size", st.st_size},
                                 {"mtime_ns", MtimeNs(st)}, {"digest", digest},
                                 {"commit", commit_},       {"repo_id", options_.repo_id}};
    const std::string meta_path = MetaPath(file.path);
    if (absl::Status status = MakeDirs(Dirname(meta_path)); !status.ok()) return status;
    return WriteFileAtomically(meta_path, meta.dump(2) + "\n");
  }

  int64_t PartSize(const RemoteFile& file) const {
    struct stat st;
    if (::stat(PartPath(file.path).c_str(), &st) != 0) return 0;
    return file.size >= 0 ? std::min<int64_t>(st.st_size, file.size) : st.st_size;
  }

  FileReport DownloadFile(HttpClient& client, const RemoteFile& file);

  void set_progress(ProgressReporter* progress) { progress_ = progress; }
  void set_commit(std::string commit) { commit_ = std::move(commit); }

 private:
  const DownloadOptions& options_;
  ProgressReporter* progress_ = nullptr;
  std::string commit_;
  std::mutex random_mutex_;
  std::mt19937_64 random_;
};

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

FileReport Downloader::DownloadFile(HttpClient& client, const RemoteFile& remote) {
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
    if (absl::Status status = MakeDirs(dir); !status.ok()) return fail(status);
  }
  ContentDigest digest(file);
  int verify_failures = 0;
  int failures_without_progress = 0;
  bool started = false;
  while (true) {
    const int fd = ::open(part_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return fail(ErrnoError("open", part_path));
    struct stat st;
    ::fstat(fd, &st);
    int64_t offset = st.st_size;
    if (file.size >= 0 && offset > file.size) {
      if (::ftruncate(fd, 0) != 0) {
        ::close(fd);
        return fail(ErrnoError("truncate", part_path));
      }
      offset = 0;
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
          for (const char* name : {"x-linked-etag", "etag"}) {
            const auto it = hub_headers.find(name);
            const std::string etag = it == hub_headers.end() ? "" : StripEtag(it->second);
            if (IsSha256Hex(etag)) {
              digest.ExpectSha256(etag);
              if (offset > 0) return HashPrefix(part_path, offset, &digest);
              break;
            }
          }
        }
        const auto range = response.headers.find("content-range");
        if (response.status == 206 && range != response.headers.end()) {
          int64_t start = -1;
          int64_t total = -1;
          if (!ParseContentRange(range->second, &start, &total) || start != offset) {
            return absl::UnavailableError(absl::StrCat("server answered Range bytes=", offset,
                                                       "- with Content-Range ", range->second));
          }
          if (file.size < 0) file.size = total;
          return absl::OkStatus();
        }
        if (offset > 0) {  // the server ignored Range: start over
          if (::ftruncate(fd, 0) != 0) return ErrnoError("truncate", part_path);
          offset = 0;
          digest.Reset();
          if (progress_ != nullptr) progress_->Rewind(file.path, 0);
        }
        const auto length = response.headers.find("content-length");
        int64_t content_length = -1;
        if (file.size < 0 && length != response.headers.end() &&
            absl::SimpleAtoi(length->second, &content_length)) {
          file.size = content_length;
        }
        return absl::OkStatus();
      };
      request.on_body = [&](absl::string_view data) -> absl::Status {
        if (!writer.has_value()) {
          writer.emplace(part_path, fd, offset, file.size, [&](absl::string_view written) {
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
        offset += writer->written();
        report.bytes_fetched += writer->written();
      }
      if (!write_status.ok()) {
        attempt_status = write_status;
      } else if (!response.ok()) {
        attempt_status = response.status();
      } else if (response->status == 416) {
        attempt_status = absl::UnavailableError("HTTP 416: the part file does not fit the "
                                                "remote file; starting over");
        ::ftruncate(fd, 0);
        digest.Reset();
        if (progress_ != nullptr) progress_->Rewind(file.path, 0);
      } else if (response->status < 200 || response->status >= 300) {
        attempt_status = HubHttpError(response->status, response->headers["x-error-code"],
                                      response->headers["x-error-message"], Context(file.path));
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
      ::unlink(part_path.c_str());
      digest.Reset();
      if (++verify_failures >= 2) return fail(attempt_status);
      ++report.retries;
      Note(file.path, absl::StrCat(attempt_status.message(), "; deleted the part file"));
      if (progress_ != nullptr) progress_->Rewind(file.path, 0);
      continue;
    }
    if (!attempt_status.ok()) {
      if (!IsRetryable(attempt_status)) return fail(attempt_status);
      failures_without_progress = offset > offset_at_attempt ? 1 : failures_without_progress + 1;
      ++report.retries;
      if (failures_without_progress > options_.max_retries) {
        return fail(absl::Status(attempt_status.code(),
                                 absl::StrCat(attempt_status.message(), " (gave up after ",
                                              options_.max_retries,
                                              " retries without progress; re-run to resume)")));
      }
      Note(file.path, absl::StrCat("retry ", report.retries, " at byte ", offset, ": ",
                                   attempt_status.message()));
      Backoff(failures_without_progress);
      continue;
    }
    const std::string actual = digest.enabled() ? digest.Finish() : "";
    if (actual != digest.expected() || (file.size >= 0 && offset != file.size)) {
      ::unlink(part_path.c_str());
      const std::string mismatch =
          actual != digest.expected()
              ? absl::StrCat(digest.name(), " mismatch: expected ", digest.expected(), ", got ",
                             actual)
              : absl::StrCat("size mismatch: expected ", file.size, " bytes, got ", offset);
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
    if (absl::Status status = WriteMeta(file, digest.expected()); !status.ok()) {
      return fail(status);
    }
    report.size = file.size;
    report.outcome = FileOutcome::kDownloaded;
    if (progress_ != nullptr) progress_->Finish(file.path, "done, verified");
    return report;
  }
}

absl::Status CheckDiskSpace(const std::string& dir, int64_t needed) {
  struct statvfs fs;
  if (::statvfs(dir.c_str(), &fs) != 0) return ErrnoError("statvfs", dir);
  const int64_t available = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  if (needed <= available) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      dir, ": not enough disk space: the download needs ", HumanBytes(needed), " (", needed,
      " bytes) but only ", HumanBytes(available), " is free; free ",
      HumanBytes(needed - available), " or pass another --local_dir"));
}

std::string OutcomeName(FileOutcome outcome) {
  switch (outcome) {
    case FileOutcome::kDownloaded:
      return "downloaded";
    case FileOutcome::kUpToDate:
      return "up_to_date";
    case FileOutcome::kFailed:
      return "failed";
  }
  return "failed";
}

}  // namespace

absl::StatusOr<RepoSnapshot> ListRepoFiles(const DownloadOptions& options, std::string* raw_json) {
  if (absl::Status status = ValidateRepoId(options.repo_id); !status.ok()) return status;
  Downloader downloader(options);
  HttpClient client;
  absl::StatusOr<std::string> body = downloader.FetchListing(client);
  if (!body.ok()) return body.status();
  absl::StatusOr<RepoSnapshot> snapshot =
      ParseRepoInfo(*body, RepoInfoUrl(options.endpoint, options.repo_id, options.revision));
  if (snapshot.ok() && raw_json != nullptr) *raw_json = *std::move(body);
  return snapshot;
}

DownloadReport DownloadAssets(const DownloadOptions& options) {
  const absl::Time start = absl::Now();
  DownloadReport report;
  report.repo_id = options.repo_id;
  report.revision = options.revision;
  report.local_dir = options.local_dir;
  const auto finish = [&](absl::Status status) {
    report.status = std::move(status);
    report.elapsed = absl::Now() - start;
    return report;
  };
  Downloader downloader(options);
  if (absl::Status status = ValidateRepoId(options.repo_id); !status.ok()) return finish(status);
  if (absl::Status status = MakeDirs(downloader.StatePath("revisions")); !status.ok()) {
    return finish(status);
  }

  // The listing: from the Hub, kept on disk for --offline.
  HttpClient main_client;
  std::string listing;
  const std::string listing_path = downloader.ListingPath();
  if (options.offline) {
    absl::StatusOr<std::string> saved = ReadFile(listing_path);
    if (!saved.ok()) {
      return finish(absl::FailedPreconditionError(absl::StrCat(
          "--offline: no saved listing of ", options.repo_id, "@", options.revision, " in ",
          listing_path, "; run once without --offline")));
    }
    listing = *std::move(saved);
  } else {
    absl::StatusOr<std::string> fetched = downloader.FetchListing(main_client);
    if (!fetched.ok()) return finish(fetched.status());
    listing = *std::move(fetched);
    if (absl::Status status = WriteFileAtomically(listing_path, listing); !status.ok()) {
      return finish(status);
    }
  }
  absl::StatusOr<RepoSnapshot> snapshot = ParseRepoInfo(listing, listing_path);
  if (!snapshot.ok()) return finish(snapshot.status());
  report.commit = snapshot->commit;
  downloader.set_commit(snapshot->commit);

  std::unique_ptr<ProgressReporter> progress;
  // The index names the shards, so it comes first.
  std::string index_json;
  std::optional<FileReport> index_report;  // set when this run fetched the index
  const auto index = std::find_if(snapshot->files.begin(), snapshot->files.end(),
                                  [](const RemoteFile& f) { return f.path == kSafetensorsIndex; });
  if (NeedsIndex(options.selection) && index != snapshot->files.end()) {
    if (!downloader.IsUpToDate(*index)) {
      if (options.offline) {
        return finish(absl::NotFoundError(absl::StrCat(
            "--offline: ", downloader.FinalPath(kSafetensorsIndex), " is not on disk")));
      }
      if (options.progress_out != nullptr) {
        progress = std::make_unique<ProgressReporter>(options.progress_out,
                                                      options.progress_bars, index->size);
        downloader.set_progress(progress.get());
      }
      index_report = downloader.DownloadFile(main_client, *index);
      downloader.set_progress(nullptr);
      progress.reset();
      if (index_report->outcome == FileOutcome::kFailed) {
        report.bytes_fetched = index_report->bytes_fetched;
        report.files.push_back(*index_report);
        return finish(absl::UnavailableError(
            absl::StrCat(kSafetensorsIndex, ": ", index_report->error)));
      }
    }
    absl::StatusOr<std::string> text = ReadFile(downloader.FinalPath(kSafetensorsIndex));
    if (!text.ok()) return finish(text.status());
    index_json = *std::move(text);
  }
  absl::StatusOr<std::vector<RemoteFile>> planned =
      SelectFiles(*snapshot, options.selection, index_json);
  if (!planned.ok()) return finish(planned.status());
  if (planned->empty()) {
    return finish(absl::InvalidArgumentError(
        "nothing to download: --assets, --include and --exclude select no file of the repo"));
  }

  // What is already in place needs nothing; the rest is fetched in parallel.
  std::vector<size_t> to_fetch;
  int64_t bytes_needed = 0;
  report.files.resize(planned->size());
  for (size_t i = 0; i < planned->size(); ++i) {
    const RemoteFile& file = (*planned)[i];
    report.files[i] = FileReport{file.path, file.size};
    if (index_report.has_value() && file.path == kSafetensorsIndex) {
      report.files[i] = *index_report;
      continue;
    }
    if (downloader.IsUpToDate(file)) {
      report.files[i].outcome = FileOutcome::kUpToDate;
      continue;
    }
    if (options.offline) {
      report.files[i].error = absl::StrCat("--offline: ", downloader.FinalPath(file.path),
                                           " is missing or does not verify");
      continue;
    }
    to_fetch.push_back(i);
    bytes_needed += std::max<int64_t>(0, file.size - downloader.PartSize(file));
  }
  if (!to_fetch.empty()) {
    if (absl::Status status = CheckDiskSpace(options.local_dir, bytes_needed); !status.ok()) {
      return finish(status);
    }
    if (options.progress_out != nullptr) {
      progress = std::make_unique<ProgressReporter>(options.progress_out, options.progress_bars,
                                                    bytes_needed);
      downloader.set_progress(progress.get());
    }
    std::atomic<size_t> next{0};
    const int workers =
        std::max(1, std::min<int>(options.max_workers, static_cast<int>(to_fetch.size())));
    std::vector<std::thread> threads;
    for (int w = 0; w < workers; ++w) {
      threads.emplace_back([&] {
        HttpClient client;
        for (size_t k = next++; k < to_fetch.size(); k = next++) {
          const size_t i = to_fetch[k];
          report.files[i] = downloader.DownloadFile(client, (*planned)[i]);
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    if (progress != nullptr) progress->Close();
  }

  int failed = 0;
  std::string first_error;
  for (const FileReport& file : report.files) {
    report.bytes_fetched += file.bytes_fetched;
    if (file.outcome == FileOutcome::kFailed) {
      if (failed++ == 0) first_error = absl::StrCat(file.path, ": ", file.error);
    }
  }
  if (failed > 0) {
    return finish(absl::UnavailableError(absl::StrCat(
        failed, " of ", report.files.size(), " files failed; first: ", first_error)));
  }
  return finish(absl::OkStatus());
}

std::string DownloadReportJson(const DownloadReport& report) {
  nlohmann::json files = nlohmann::json::array();
  for (const FileReport& file : report.files) {
    nlohmann::json entry = {{"path", file.path},
                            {"size", file.size},
                            {"status", OutcomeName(file.outcome)},
                            {"bytes_fetched", file.bytes_fetched},
                            {"retries", file.retries}};
    if (!file.error.empty()) entry["error"] = file.error;
    files.push_back(std::move(entry));
  }
  nlohmann::json json = {{"repo_id", report.repo_id},
                         {"revision", report.revision},
                         {"commit", report.commit},
                         {"local_dir", report.local_dir},
                         {"status", report.status.ok() ? "ok" : "error"},
                         {"files", std::move(files)},
                         {"bytes_fetched", report.bytes_fetched},
                         {"seconds", absl::ToDoubleSeconds(report.elapsed)}};
  if (!report.status.ok()) json["error"] = std::string(report.status.message());
  return json.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string FindHubToken(absl::string_view flag_value) {
  if (!flag_value.empty()) return std::string(flag_value);
  const auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  if (std::string token = env("HF_TOKEN"); !token.empty()) return token;
  std::string token_path = env("HF_TOKEN_PATH");
  if (token_path.empty()) {
    std::string hf_home = env("HF_HOME");
    if (hf_home.empty()) {
      const std::string cache = env("XDG_CACHE_HOME");
      hf_home = cache.empty() ? absl::StrCat(env("HOME"), "/.cache/huggingface")
                              : absl::StrCat(cache, "/huggingface");
    }
    token_path = absl::StrCat(hf_home, "/token");
  }
  absl::StatusOr<std::string> token = ReadFile(token_path);
  return token.ok() ? std::string(absl::StripAsciiWhitespace(*token)) : std::string();
}

std::string HubEndpointFromEnv() {
  const char* endpoint = std::getenv("HF_ENDPOINT");
  absl::string_view value = endpoint == nullptr || *endpoint == '\0' ? kDefaultHubEndpoint
                                                                     : endpoint;
  while (absl::ConsumeSuffix(&value, "/")) {
  }
  return std::string(value);
}

}  // namespace titan
