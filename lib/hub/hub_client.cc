#include "lib/hub/hub_client.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "lib/hub/asset_plan.h"
#include "lib/hub/file_downloader.h"
#include "lib/hub/http_client.h"
#include "lib/hub/progress.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/folder_lock.h"
#include "lib/util/redact.h"
#include "lib/util/short_text.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

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

// Both name folders and files under local_dir, so they are checked before anything is made.
absl::Status ValidateRepoAndRevision(const DownloadOptions& options) {
  if (absl::Status status = ValidateRepoId(options.repo_id); !status.ok()) return status;
  return ValidateRevision(options.revision);
}

absl::Status NoSavedListing(const DownloadOptions& options, const std::string& listing_path) {
  return absl::FailedPreconditionError(absl::StrCat("--offline: no saved listing of ",
                                                    options.repo_id, "@", options.revision, " in ",
                                                    listing_path, "; run once without --offline"));
}

// Why an offline run cannot use a file: `not_in_place` from CheckInPlace, which names the file.
absl::Status OfflineError(const absl::Status& not_in_place) {
  return absl::Status(not_in_place.code(), absl::StrCat("--offline: ", not_in_place.message()));
}

// The --repo_id values that filled the folder under another id the Hub gave them (a renamed
// repo), one per line: an --offline run of such a --repo_id has only this to tell it is the same.
std::string RenamedIdsPath(const FileDownloader& downloader) {
  return downloader.StatePath("requested_ids");
}

// The recorded ids ("" where none are).
std::string RenamedIds(const FileDownloader& downloader) {
  absl::StatusOr<std::string> text = ReadFile(RenamedIdsPath(downloader));
  return text.ok() ? *std::move(text) : std::string();
}

bool ListsId(absl::string_view ids, absl::string_view repo_id) {
  for (absl::string_view line : absl::StrSplit(ids, '\n')) {
    if (absl::EqualsIgnoreCase(line, repo_id)) return true;
  }
  return false;
}

// Records that --repo_id filled the folder though the Hub calls the repo `hub_id` now.
absl::Status RecordRenamedId(const FileDownloader& downloader, const DownloadOptions& options,
                             absl::string_view hub_id) {
  if (hub_id.empty() || absl::EqualsIgnoreCase(hub_id, options.repo_id)) return absl::OkStatus();
  const std::string ids = RenamedIds(downloader);
  if (ListsId(ids, options.repo_id)) return absl::OkStatus();
  return WriteFileAtomically(RenamedIdsPath(downloader), absl::StrCat(ids, options.repo_id, "\n"));
}

// Two repos of one NAME share <local_dir>/NAME: a folder whose saved listings belong to another
// repo than `repo_id` (or `hub_id`, the Hub's spelling of it this run, or the id a renamed
// --repo_id had when it filled the folder) is refused. A listing without an id (older tools) or
// that does not parse says nothing about the folder's repo.
absl::Status CheckFolderHoldsRepo(const FileDownloader& downloader, const DownloadOptions& options,
                                  absl::string_view hub_id) {
  if (ListsId(RenamedIds(downloader), options.repo_id)) return absl::OkStatus();
  const std::string revisions = downloader.StatePath("revisions");
  if (!IsDirectory(revisions)) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(revisions);
  if (!names.ok()) return names.status();
  std::sort(names->begin(), names->end());
  for (const std::string& name : *names) {
    const std::string path = absl::StrCat(revisions, "/", name);
    absl::StatusOr<std::string> text = ReadFile(path);
    if (!text.ok()) continue;
    absl::StatusOr<RepoSnapshot> saved = ParseRepoInfo(*text, path);
    if (!saved.ok() || saved->repo_id.empty() ||
        absl::EqualsIgnoreCase(saved->repo_id, options.repo_id) ||
        absl::EqualsIgnoreCase(saved->repo_id, hub_id)) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        options.local_dir, " holds the files of ", saved->repo_id, " (its saved listing ", path,
        " says so), not of ", options.repo_id, "; pass another --local_dir for ", options.repo_id));
  }
  return absl::OkStatus();
}

// A failed file's error led by its repo path, once: a mismatch's error starts with the path, an
// HTTP error with "ORG/NAME@REVISION: path".
std::string NamedFileError(const DownloadOptions& options, const FileReport& file) {
  if (absl::StartsWith(file.error, absl::StrCat(file.path, ": ")) ||
      absl::StartsWith(file.error, absl::StrCat(options.repo_id, "@", options.revision, ": ",
                                                file.path, ": "))) {
    return file.error;
  }
  return absl::StrCat(file.path, ": ", file.error);
}

}  // namespace

absl::StatusOr<RepoSnapshot> ListRepoFiles(const DownloadOptions& options, std::string* raw_json) {
  if (absl::Status status = ValidateRepoAndRevision(options); !status.ok()) return status;
  FileDownloader downloader(options);
  HttpClient client;
  absl::StatusOr<std::string> body = downloader.FetchListing(client);
  if (!body.ok()) return body.status();
  absl::StatusOr<RepoSnapshot> snapshot = ParseRepoInfo(
      *body, RedactUrl(RepoInfoUrl(options.endpoint, options.repo_id, options.revision)));
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
  FileDownloader downloader(options);
  if (absl::Status status = ValidateRepoAndRevision(options); !status.ok()) return finish(status);
  const std::string listing_path = downloader.ListingPath();
  // Without a saved listing an offline run can only fail: it does so before making the folder.
  if (options.offline && ::access(listing_path.c_str(), F_OK) != 0) {
    return finish(NoSavedListing(options, listing_path));
  }
  // Two runs into one folder would append to the same part files; the second one stops at once.
  absl::StatusOr<std::unique_ptr<FolderLock>> lock =
      FolderLock::Acquire(absl::StrCat(options.local_dir, "/", kDownloadStateDir));
  if (!lock.ok()) {
    return finish(absl::Status(lock.status().code(),
                               absl::StrCat("another download_assets is using ", options.local_dir,
                                            ": ", lock.status().message())));
  }

  // The listing: from the Hub, kept on disk for --offline.
  HttpClient main_client;
  std::string listing;
  if (options.offline) {
    absl::StatusOr<std::string> saved = ReadFile(listing_path);
    if (!saved.ok()) return finish(NoSavedListing(options, listing_path));
    listing = *std::move(saved);
  } else {
    absl::StatusOr<std::string> fetched = downloader.FetchListing(main_client);
    if (!fetched.ok()) return finish(fetched.status());
    listing = *std::move(fetched);
  }
  // A listing that does not parse names where it came from, and is not kept for --offline.
  absl::StatusOr<RepoSnapshot> snapshot = ParseRepoInfo(
      listing, options.offline
                   ? listing_path
                   : RedactUrl(RepoInfoUrl(options.endpoint, options.repo_id, options.revision)));
  if (!snapshot.ok()) return finish(snapshot.status());
  // Offline, the listing is the folder's own: only --repo_id can tell it is another repo's.
  const std::string hub_id = options.offline ? "" : snapshot->repo_id;
  if (absl::Status status = CheckFolderHoldsRepo(downloader, options, hub_id); !status.ok()) {
    return finish(status);
  }
  if (!options.offline) {
    // Made here, not before the lock: the lock takes back the folders it made only while they
    // hold nothing else, so a run that fails before this point leaves the file system as it was.
    if (absl::Status status = MakeDirectories(downloader.StatePath("revisions")); !status.ok()) {
      return finish(status);
    }
    if (absl::Status status = WriteFileAtomically(listing_path, listing); !status.ok()) {
      return finish(status);
    }
    if (absl::Status status = RecordRenamedId(downloader, options, hub_id); !status.ok()) {
      return finish(status);
    }
  }
  report.commit = snapshot->commit;
  downloader.set_commit(snapshot->commit);

  std::unique_ptr<ProgressReporter> progress;
  // The index names the shards, so it comes first.
  std::string index_json;
  std::optional<FileReport> index_report;  // set when this run fetched or checked the index
  const auto index = std::find_if(snapshot->files.begin(), snapshot->files.end(),
                                  [](const RemoteFile& f) { return f.path == kSafetensorsIndex; });
  if (NeedsIndex(options.selection) && index != snapshot->files.end()) {
    std::string index_warning;
    if (absl::Status in_place = downloader.CheckInPlace(*index, &index_warning); in_place.ok()) {
      // Not checked again below: --verify would hash it, and warn, twice.
      index_report = FileReport{index->path, index->size, FileOutcome::kUpToDate};
      index_report->warning = index_warning;
    } else {
      if (options.offline) return finish(OfflineError(in_place));
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
        return finish(absl::UnavailableError(NamedFileError(options, *index_report)));
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
  for (const RemoteFile& file : *planned) {
    if (absl::Status status = CheckOutsideStateDir(file.path); !status.ok()) return finish(status);
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
    const absl::Status in_place = downloader.CheckInPlace(file, &report.files[i].warning);
    if (in_place.ok()) {
      report.files[i].outcome = FileOutcome::kUpToDate;
      continue;
    }
    if (options.offline) {
      report.files[i].error = std::string(OfflineError(in_place).message());
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
      if (failed++ == 0) first_error = NamedFileError(options, file);
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
    if (!file.warning.empty()) entry["warning"] = file.warning;
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
  return JsonText(json, 2);
}

absl::StatusOr<std::string> FindHubToken(absl::string_view flag_value) {
  // The token goes into an HTTP header: a line break in it would start a header of its own. Hub
  // tokens are printable ASCII without spaces (0x21..0x7e).
  const auto checked = [](absl::string_view source,
                          std::string token) -> absl::StatusOr<std::string> {
    const auto bad = std::find_if(token.begin(), token.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e;
    });
    if (bad == token.end()) return token;
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the Hub token has whitespace, a control character or a non-ASCII byte at byte ",
        bad - token.begin() + 1, "; expected one word of printable ASCII characters"));
  };
  if (!flag_value.empty()) return checked("--hf_token", std::string(flag_value));
  const auto env = [](const char* name) {
    const char* value = std::getenv(name);
    return value == nullptr ? std::string() : std::string(value);
  };
  if (std::string token = env("HF_TOKEN"); !token.empty()) return checked("$HF_TOKEN", token);
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
  if (!token.ok()) return std::string();
  return checked(token_path, std::string(absl::StripAsciiWhitespace(*token)));
}

absl::StatusOr<std::string> HubEndpointFromEnv() {
  const char* endpoint = std::getenv("HF_ENDPOINT");
  absl::string_view value = endpoint == nullptr || *endpoint == '\0' ? kDefaultHubEndpoint
                                                                     : endpoint;
  // Without a scheme no URL compares as the endpoint's origin, so the token would silently stay
  // home and a gated repo's 401 would blame the token.
  if (!absl::StartsWithIgnoreCase(value, "http://") &&
      !absl::StartsWithIgnoreCase(value, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "$HF_ENDPOINT: expected a URL starting with http:// or https:// (as "
        "https://huggingface.co), got \"",
        absl::StrContains(value, "://") ? RedactUrl(value)
                                        : RedactUrl(absl::StrCat("x://", value)).substr(4),
        "\""));
  }
  while (absl::ConsumeSuffix(&value, "/")) {
  }
  return std::string(value);
}

}  // namespace titan
