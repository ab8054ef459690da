#ifndef TITAN_LIB_HUB_HUB_API_H_
#define TITAN_LIB_HUB_HUB_API_H_

// The Hugging Face Hub's HTTP API as data: repo listings, URLs, and its error responses as Status.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

inline constexpr char kDefaultHubEndpoint[] = "https://huggingface.co";

// One file of a repo at a commit, as the Hub lists it.
struct RemoteFile {
  std::string path;      // relative to the repo root, e.g. "original/tokenizer.model"
  int64_t size = -1;     // -1 when the listing did not say
  std::string sha256;    // LFS oid (lowercase hex); empty for files kept in git
  std::string git_sha1;  // git blob id of a file kept in git; empty for LFS (names the pointer)
};

struct RepoSnapshot {
  std::string repo_id;  // the listing's "id" (ORG/NAME as the Hub spells it); empty when absent
  std::string commit;   // the revision resolved to a commit sha
  std::vector<RemoteFile> files;
};

// Parses GET /api/models/{repo}/revision/{rev}?blobs=true. `source` names the input in errors.
// Refuses listings whose file names are unsafe (see ValidateRemotePath).
absl::StatusOr<RepoSnapshot> ParseRepoInfo(absl::string_view json, absl::string_view source);

// A remote file name must stay inside the download folder: no "..", no absolute path, no NUL, no
// empty or "." segment, no backslash.
absl::Status ValidateRemotePath(absl::string_view path);

// "ORG/NAME" as the Hub allows it: letters, digits, '-', '_', '.'; no part starts or ends with
// '-' or '.'; no "--" or ".."; NAME at most 96 characters.
absl::Status ValidateRepoId(absl::string_view repo_id);

// A branch, tag or commit: not empty (the saved listing is named after it), and without an empty,
// "." or ".." path component (git refs have none; in a URL they would be dot-segments).
absl::Status ValidateRevision(absl::string_view revision);

// {endpoint}/api/models/{repo}/revision/{revision}?blobs=true
std::string RepoInfoUrl(absl::string_view endpoint, absl::string_view repo_id,
                        absl::string_view revision);

// {endpoint}/{repo}/resolve/{revision}/{path}, each path segment percent-encoded.
std::string ResolveUrl(absl::string_view endpoint, absl::string_view repo_id,
                       absl::string_view revision, absl::string_view path);

// True when both URLs have the same scheme, host and port: the token goes only there.
bool SameOrigin(absl::string_view url_a, absl::string_view url_b);

// What the user is asking about when a request fails; shapes the error text.
struct HubRequestContext {
  std::string endpoint;
  std::string repo_id;
  std::string revision;
  std::string path;  // empty for the repo listing
  bool has_token = false;
};

// Turns a non-2xx Hub response into an error that says what to do; the endpoint's userinfo is
// redacted. `error_code` is the
// X-Error-Code header (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) or empty.
absl::Status HubHttpError(long http_status, absl::string_view error_code,
                          absl::string_view error_message, const HubRequestContext& context);

// 5xx, 408 and 429 are worth retrying; other statuses will not change.
bool IsRetryableHttpStatus(long http_status);

}  // namespace titan

#endif  // TITAN_LIB_HUB_HUB_API_H_
