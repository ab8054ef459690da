#ifndef TITAN_LIB_HUB_FILE_DOWNLOADER_H_
#define TITAN_LIB_HUB_FILE_DOWNLOADER_H_

// Fetches one file of a Hub repo into a local folder: resumes its part file with HTTP Range,
// retries with backoff, verifies size and digest, and publishes it by atomic rename with a sidecar
// that lets a later run skip it.

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/hub/asset_plan.h"
#include "lib/hub/http_client.h"
#include "lib/hub/hub_api.h"
#include "lib/hub/progress.h"

namespace titan {

struct DownloadOptions {
  std::string endpoint = kDefaultHubEndpoint;
  std::string repo_id;            // ORG/NAME
  std::string revision = "main";  // branch, tag or commit
  AssetSelection selection;
  std::string local_dir;  // files land at local_dir/<repo path>
  std::string token;      // sent only to `endpoint`; empty for anonymous access
  bool offline = false;   // no network: report what is on disk from the last listing
  bool verify = false;    // re-hash files on disk rather than trust their recorded size and mtime
  int max_workers = 8;    // files fetched in parallel
  int max_retries = 10;   // consecutive failed attempts on one file that reach no new byte
  absl::Duration retry_base_delay = absl::Seconds(1);  // doubles per failure, with jitter
  absl::Duration retry_max_delay = absl::Seconds(60);
  absl::Duration connect_timeout = absl::Seconds(30);
  absl::Duration stall_timeout = absl::Seconds(60);  // below 1 KiB/s this long: reconnect
  FILE* progress_out = stderr;                       // nullptr: silent
  // Where "FILE: not verified: …" goes when no progress reporter is showing: it is printed
  // whatever progress_out is (--progress=none hides progress, not that a file went unchecked).
  FILE* warning_out = stderr;
  bool progress_bars = false;                        // bars for a terminal rather than plain lines
};

enum class FileOutcome { kDownloaded, kUpToDate, kFailed };

struct FileReport {
  std::string path;
  int64_t size = -1;
  FileOutcome outcome = FileOutcome::kFailed;
  int64_t bytes_fetched = 0;  // over the network in this run
  int retries = 0;
  std::string error;    // for kFailed
  // For kDownloaded, and kUpToDate under --verify: what could not be checked (no digest to verify
  // it by).
  std::string warning;
};

// The longest a server's Retry-After makes a retry wait: longer asks are more likely a
// misconfigured server than a plan, and the user can re-run.
inline constexpr absl::Duration kMaxRetryAfter = absl::Minutes(5);

// local_dir's folder for the downloader's own state (part files, sidecars, saved listings).
inline constexpr char kDownloadStateDir[] = ".cache/download_assets";

// Refuses a repo path that would land in kDownloadStateDir and overwrite the downloader's state,
// or that names the folder or one of its ancestors (`.cache`), where it would keep it from being
// created.
absl::Status CheckOutsideStateDir(absl::string_view repo_path);

// One run's shared state; each worker thread owns its HttpClient.
class FileDownloader {
 public:
  explicit FileDownloader(const DownloadOptions& options);

  // Where the repo file `path` lands.
  std::string FinalPath(const std::string& path) const;
  // `name` in local_dir's state folder (part files, sidecars, saved listings).
  std::string StatePath(absl::string_view name) const;
  // The listing of options.revision saved for --offline.
  std::string ListingPath() const;

  // The repo listing's JSON, with the redirects and retries of a file transfer.
  absl::StatusOr<std::string> FetchListing(HttpClient& client);

  // OK when `file` is already in place: size and mtime match the sidecar written when it was
  // verified, or, lacking one or with options.verify, its content hashes to the expected digest
  // (a new sidecar is written). Else why not, starting with the file's path: NotFound (missing),
  // FailedPrecondition (another size than the listing's), DataLoss (the digest differs: its
  // sidecar is deleted, so no later run trusts the file by size and mtime again). With
  // options.verify, a file with no digest to hash it by is OK on its size, and `warning` (when
  // given) says so; the warning is printed too.
  absl::Status CheckInPlace(const RemoteFile& file, std::string* warning = nullptr);

  // Bytes of `file` already in its part file from an earlier run.
  int64_t PartSize(const RemoteFile& file) const;

  // Fetches `file` from its part file's end, verifies it and moves it to FinalPath; never throws.
  FileReport DownloadFile(HttpClient& client, const RemoteFile& file);

  void set_progress(ProgressReporter* progress) { progress_ = progress; }
  void set_commit(std::string commit) { commit_ = std::move(commit); }

 private:
  std::string PartPath(const std::string& path) const;
  std::string MetaPath(const std::string& path) const;
  // The part file's record of the content it holds: the expected digest and size.
  std::string PartRecordPath(const std::string& path) const;
  // False when the part file's record names another digest or size (another version of the
  // file); true without a record (a part file of an older tool: its digest check still applies).
  bool PartIsFor(const RemoteFile& file) const;
  // Deletes a part file of another version and records which content the part file holds.
  absl::Status TiePartToContent(const RemoteFile& file);
  HubRequestContext Context(const std::string& path) const;

  // GET that follows redirects; Authorization goes only to the Hub endpoint's origin. Headers
  // that the Hub puts on its redirect (X-Linked-Etag …) are merged into `hub_headers` (those of
  // the final response are in the response).
  absl::StatusOr<HttpResponse> GetFollowing(
      HttpClient& client, HttpRequest request,
      absl::flat_hash_map<std::string, std::string>* hub_headers);
  // Sleeps the jittered exponential delay, or `at_least` (a server's Retry-After, capped at
  // kMaxRetryAfter) when longer.
  void Backoff(int failures, absl::Duration at_least = absl::ZeroDuration());
  static bool IsRetryable(const absl::Status& status);
  void Note(const std::string& path, const std::string& message);
  // "path: message" through the progress reporter when one shows, else on options.warning_out.
  void Warn(const std::string& path, const std::string& message);
  absl::Status WriteMeta(const RemoteFile& file, const std::string& digest);
  // Deletes `file`'s sidecar and returns `why`, plus the unlink error when the sidecar stays.
  absl::Status DropRecord(const RemoteFile& file, const absl::Status& why);

  const DownloadOptions& options_;
  ProgressReporter* progress_ = nullptr;
  std::string commit_;
  std::mutex random_mutex_;
  std::mt19937_64 random_;
};

}  // namespace titan

#endif  // TITAN_LIB_HUB_FILE_DOWNLOADER_H_
