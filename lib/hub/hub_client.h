#ifndef TITAN_LIB_HUB_HUB_CLIENT_H_
#define TITAN_LIB_HUB_HUB_CLIENT_H_

// Downloads a repo's assets from the Hugging Face Hub into a folder: plans by asset groups and
// globs, fetches in parallel with resume (HTTP Range), retries with backoff, verifies size and
// digest, and publishes each file by atomic rename. Re-running fetches only what changed.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "lib/hub/file_downloader.h"  // DownloadOptions, FileOutcome, FileReport
#include "lib/hub/hub_api.h"

namespace titan {

struct DownloadReport {
  absl::Status status;  // OK when every planned file is on disk and verified
  std::string repo_id;
  std::string revision;
  std::string commit;
  std::string local_dir;
  std::vector<FileReport> files;
  int64_t bytes_fetched = 0;
  absl::Duration elapsed;
};

// Runs a whole download; never throws. Errors before any file is planned leave `files` empty.
DownloadReport DownloadAssets(const DownloadOptions& options);

// Lists the repo's files at `revision` (GET /api/models/{repo}/revision/{rev}?blobs=true).
// `raw_json`, when given, receives the response body.
absl::StatusOr<RepoSnapshot> ListRepoFiles(const DownloadOptions& options,
                                           std::string* raw_json = nullptr);

// The report as JSON: repo, commit, status, error, files (path, size, status, bytes, retries,
// error), bytes_fetched, seconds.
std::string DownloadReportJson(const DownloadReport& report);

// The token to use: `flag_value` if set, else $HF_TOKEN, else the file at $HF_TOKEN_PATH or
// $HF_HOME/token (default ~/.cache/huggingface/token; surrounding whitespace stripped); empty when
// none. A token with whitespace or control characters inside is refused, naming its source only.
absl::StatusOr<std::string> FindHubToken(absl::string_view flag_value);

// $HF_ENDPOINT without a trailing slash, or the public Hub. One without http:// or https:// is
// refused, as huggingface_hub's requests refuses it.
absl::StatusOr<std::string> HubEndpointFromEnv();

}  // namespace titan

#endif  // TITAN_LIB_HUB_HUB_CLIENT_H_
