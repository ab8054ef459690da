#include "lib/hub/hub_api.h"

#include <curl/curl.h>

#include <memory>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/hub/http_client.h"
#include "lib/util/redact.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

bool IsLowerHex(absl::string_view s, size_t length) {
  if (s.size() != length) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c) && !(c >= 'a' && c <= 'f')) return false;
  }
  return true;
}

// The content's sha256 from an LFS entry: "sha256" as the revision listing spells it, else "oid"
// as the tree listing does, either bare or as a pointer file's "sha256:<hex>"; empty when neither
// is 64 hex digits.
std::string LfsSha256(const nlohmann::json& lfs) {
  for (const char* key : {"sha256", "oid"}) {
    const auto value = lfs.find(key);
    if (value == lfs.end() || !value->is_string()) continue;
    absl::string_view hex = value->get_ref<const std::string&>();
    absl::ConsumePrefix(&hex, "sha256:");
    const std::string lower = absl::AsciiStrToLower(hex);
    if (IsLowerHex(lower, 64)) return lower;
  }
  return "";
}

std::string Escape(absl::string_view text) {
  char* escaped = curl_easy_escape(nullptr, text.data(), static_cast<int>(text.size()));
  std::string result = escaped == nullptr ? std::string(text) : std::string(escaped);
  curl_free(escaped);
  return result;
}

absl::string_view TrimSlash(absl::string_view endpoint) {
  while (absl::ConsumeSuffix(&endpoint, "/")) {
  }
  return endpoint;
}

// scheme://host:port of a URL (default port filled in), or empty when it does not parse.
std::string Origin(absl::string_view url) {
  std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> handle(curl_url(), &curl_url_cleanup);
  if (handle == nullptr ||
      curl_url_set(handle.get(), CURLUPART_URL, std::string(url).c_str(), 0) != CURLUE_OK) {
    return "";
  }
  std::string origin;
  for (CURLUPart part : {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT}) {
    char* value = nullptr;
    if (curl_url_get(handle.get(), part, &value, CURLU_DEFAULT_PORT) != CURLUE_OK) return "";
    absl::StrAppend(&origin, absl::AsciiStrToLower(value), "|");
    curl_free(value);
  }
  return origin;
}

}  // namespace

absl::Status ValidateRemotePath(absl::string_view path) {
  const auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("refusing remote file name \"",
                                                   absl::CHexEscape(path), "\": ", why));
  };
  if (path.empty()) return refuse("empty name");
  if (path.find('\0') != absl::string_view::npos) return refuse("contains NUL");
  if (path.find('\\') != absl::string_view::npos) return refuse("contains a backslash");
  if (path.front() == '/') return refuse("absolute path");
  for (absl::string_view segment : absl::StrSplit(path, '/')) {
    if (segment == "..") return refuse("\"..\" would leave the download folder");
    if (segment.empty() || segment == ".") return refuse("empty or \".\" path segment");
  }
  return absl::OkStatus();
}

absl::Status ValidateRepoId(absl::string_view repo_id) {
  // The Hub's rule (huggingface_hub's validate_repo_id); it keeps "." and "-" off the front,
  // where NAME would make a hidden folder or read as a flag.
  const std::vector<absl::string_view> parts = absl::StrSplit(repo_id, '/');
  bool valid = parts.size() == 2 && parts[1].size() <= 96 && !absl::StrContains(repo_id, "--") &&
               !absl::StrContains(repo_id, "..");
  const auto punctuation = [](char c) { return c == '-' || c == '.'; };
  for (absl::string_view part : parts) {
    valid = valid && !part.empty() && !punctuation(part.front()) && !punctuation(part.back());
    for (char c : part) valid = valid && (absl::ascii_isalnum(c) || c == '_' || punctuation(c));
  }
  if (valid) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--repo_id: expected ORG/NAME of letters, digits, '-', '_' and '.', neither starting nor "
      "ending with '-' or '.', without '--' or '..', NAME at most 96 characters (the Hub's rule), "
      "got \"",
      absl::CHexEscape(repo_id), "\""));
}

absl::Status ValidateRevision(absl::string_view revision) {
  if (revision.empty()) {
    return absl::InvalidArgumentError(
        "--revision: expected a branch, tag or commit, got an empty string");
  }
  // In a URL path "." and ".." are dot-segments: "/revision/.." would resolve to the default
  // branch and be saved as revision "..". Git refs cannot have such components either.
  for (absl::string_view component : absl::StrSplit(revision, '/')) {
    if (component.empty() || component == "." || component == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--revision: expected a branch, tag or commit, got \"", absl::CHexEscape(revision),
          "\": a git ref has no empty, \".\" or \"..\" path component"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RepoSnapshot> ParseRepoInfo(absl::string_view json, absl::string_view source) {
  nlohmann::json info = nlohmann::json::parse(json.begin(), json.end(), nullptr,
                                              /*allow_exceptions=*/false);
  if (info.is_discarded() || !info.is_object()) {
    return absl::DataLossError(absl::StrCat(source, ": expected a JSON object"));
  }
  RepoSnapshot snapshot;
  const auto sha = info.find("sha");
  if (sha == info.end() || !sha->is_string()) {
    return absl::DataLossError(absl::StrCat(source, ": \"sha\": expected the commit as a string"));
  }
  snapshot.commit = sha->get<std::string>();
  if (const auto id = info.find("id"); id != info.end() && id->is_string()) {
    snapshot.repo_id = id->get<std::string>();
  }
  const auto siblings = info.find("siblings");
  if (siblings == info.end() || !siblings->is_array()) {
    return absl::DataLossError(absl::StrCat(source, ": \"siblings\": expected an array"));
  }
  absl::flat_hash_set<std::string> seen;
  for (const nlohmann::json& sibling : *siblings) {
    const auto name = sibling.find("rfilename");
    if (!sibling.is_object() || name == sibling.end() || !name->is_string()) {
      return absl::DataLossError(
          absl::StrCat(source, ": \"siblings\": expected objects with a string \"rfilename\""));
    }
    RemoteFile file;
    file.path = name->get<std::string>();
    if (absl::Status status = ValidateRemotePath(file.path); !status.ok()) {
      return absl::PermissionDeniedError(absl::StrCat(source, ": ", status.message()));
    }
    // Two entries would share one part file: both transfers append to it.
    if (!seen.insert(file.path).second) {
      return absl::PermissionDeniedError(absl::StrCat(source, ": refusing remote file name \"",
                                                      absl::CHexEscape(file.path),
                                                      "\": listed twice"));
    }
    if (const auto size = sibling.find("size"); size != sibling.end() && size->is_number_integer()) {
      file.size = size->get<int64_t>();
    }
    if (const auto blob = sibling.find("blobId"); blob != sibling.end() && blob->is_string()) {
      const std::string id = blob->get<std::string>();
      if (IsLowerHex(id, 40)) file.git_sha1 = id;
    }
    if (const auto lfs = sibling.find("lfs"); lfs != sibling.end() && lfs->is_object()) {
      file.sha256 = LfsSha256(*lfs);
      // blobId of an LFS file names its pointer, not the content: it cannot check the file, even
      // when no sha256 is listed (the downloader then takes one from the response's ETag).
      file.git_sha1.clear();
      if (const auto size = lfs->find("size"); size != lfs->end() && size->is_number_integer()) {
        file.size = size->get<int64_t>();
      }
    }
    snapshot.files.push_back(std::move(file));
  }
  return snapshot;
}

std::string RepoInfoUrl(absl::string_view endpoint, absl::string_view repo_id,
                        absl::string_view revision) {
  return absl::StrCat(TrimSlash(endpoint), "/api/models/", repo_id, "/revision/",
                      Escape(revision), "?blobs=true");
}

std::string ResolveUrl(absl::string_view endpoint, absl::string_view repo_id,
                       absl::string_view revision, absl::string_view path) {
  std::vector<std::string> segments;
  for (absl::string_view segment : absl::StrSplit(path, '/')) segments.push_back(Escape(segment));
  return absl::StrCat(TrimSlash(endpoint), "/", repo_id, "/resolve/", Escape(revision), "/",
                      absl::StrJoin(segments, "/"));
}

bool SameOrigin(absl::string_view url_a, absl::string_view url_b) {
  const std::string origin_a = Origin(url_a);
  return !origin_a.empty() && origin_a == Origin(url_b);
}

bool IsRetryableHttpStatus(long http_status) {
  return http_status >= 500 || http_status == 408 || http_status == 429;
}

absl::Status HubHttpError(long http_status, absl::string_view error_code,
                          absl::string_view error_message, const HubRequestContext& context) {
  const std::string endpoint = RedactUrl(TrimSlash(context.endpoint));
  const std::string repo_url = absl::StrCat(endpoint, "/", context.repo_id);
  const std::string what =
      context.path.empty() ? absl::StrCat(context.repo_id, "@", context.revision)
                           : absl::StrCat(context.repo_id, "@", context.revision, ": ",
                                          context.path);
  const std::string detail =
      error_message.empty() ? ""
                            : absl::StrCat(" (Hub says: ", RedactSecretsIn(error_message), ")");
  if (error_code == "GatedRepo" || http_status == 401 || http_status == 403) {
    const std::string token_hint =
        context.has_token
            ? "the token you passed has no access: check that access was granted and the token "
              "has read permission"
            : "no token was given: pass --hf_token=..., set $HF_TOKEN, or run `hf auth login`";
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": HTTP ", http_status, ": ", repo_url,
        " is gated or private; request access at ", repo_url, " and pass --hf_token (",
        token_hint, ")", detail));
  }
  if (http_status == 404) {
    if (error_code == "RevisionNotFound") {
      return absl::NotFoundError(absl::StrCat(what, ": revision \"", context.revision,
                                              "\" not found in ", context.repo_id, detail));
    }
    if (error_code == "EntryNotFound" || (!context.path.empty() && error_code.empty())) {
      return absl::NotFoundError(absl::StrCat(what, ": file \"", context.path,
                                              "\" not found at revision ", context.revision,
                                              detail));
    }
    return absl::NotFoundError(absl::StrCat(what, ": repository \"", context.repo_id,
                                            "\" not found at ", endpoint,
                                            " (check the spelling, or pass --hf_token if it is "
                                            "private)",
                                            detail));
  }
  const absl::StatusCode code = IsRetryableHttpStatus(http_status)
                                    ? absl::StatusCode::kUnavailable
                                    : absl::StatusCode::kFailedPrecondition;
  return absl::Status(code, absl::StrCat(what, ": HTTP ", http_status, " from ", endpoint, detail));
}

}  // namespace titan
