// download_assets: fetches a Hugging Face Hub repo's tokenizer, config and weights into a folder.
//
//   bazel run //tools/download_assets -- --repo_id=meta-llama/Llama-3.1-8B --assets=tokenizer

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "gflags/gflags.h"
#include "lib/hub/asset_plan.h"
#include "lib/hub/hub_client.h"
#include "lib/hub/progress.h"
#include "tools/common/tool_flags.h"
#include "tools/common/tool_output.h"

DEFINE_string(repo_id, "", "Hub repo as ORG/NAME, e.g. meta-llama/Llama-3.1-8B.");
DEFINE_string(revision, "main", "Branch, tag or commit to download.");
DEFINE_string(assets, "",
              "Comma-separated groups: tokenizer (tokenizer.json, tokenizer_config.json, "
              "special_tokens_map.json, [original/]tokenizer.model), config (config.json, "
              "generation_config.json), safetensors (the shards named by "
              "model.safetensors.index.json, and the index), index, all (every file).");
DEFINE_string(include, "",
              "Comma-separated globs of more repo paths to fetch, matched as huggingface_hub's "
              "allow_patterns (Python fnmatch; `*` crosses `/`; `DIR/` is the folder's files).");
DEFINE_string(exclude, "", "Comma-separated globs of repo paths never to fetch (as --include's).");
DEFINE_string(local_dir, "assets/hf",
              "Files land in <local_dir>/<NAME>/ (NAME from --repo_id); a relative path is taken "
              "from the directory `bazel run` was started in. One run per folder at a time: a "
              "second run into it stops at once with an error. A folder holding another repo of "
              "the same NAME is refused.");
DEFINE_string(hf_token, "",
              "Hub access token for gated or private repos; default $HF_TOKEN, then the file "
              "$HF_TOKEN_PATH or $HF_HOME/token (~/.cache/huggingface/token). Sent only to the "
              "Hub endpoint ($HF_ENDPOINT), never printed.");
DEFINE_bool(offline, false,
            "No network: the files of the last saved listing must be on disk with the size and "
            "mtime recorded when they were verified (a file without that record is hashed, or, "
            "with no digest to hash it by, taken on its size). "
            "Content changed in place behind an unchanged size and mtime needs --verify.");
DEFINE_bool(verify, false,
            "Re-hash every selected file on disk (sha256 for LFS files, else the git blob sha1) "
            "instead of trusting its recorded size and mtime; one that does not match is "
            "downloaded again (with --offline: reported as an error). Reads every byte.");
DEFINE_int32(max_workers, 8, "Files downloaded in parallel.");
DEFINE_int32(max_retries, 10,
             "Retries (0 or more) of one file in a row that get no further into it than an "
             "earlier attempt did.");
DEFINE_int32(retry_base_ms, 1000,
             "First retry delay, at most --retry_max_ms; doubles per failure, with jitter.");
DEFINE_int32(retry_max_ms, 60000,
             "Longest retry delay of our own; a 429's or 503's Retry-After is waited for even "
             "when longer (up to 5 minutes).");
DEFINE_int32(connect_timeout_s, 30, "Connection timeout.");
DEFINE_int32(stall_timeout_s, 60, "Reconnect when a transfer stays below 1 KiB/s this long.");
DEFINE_string(progress, "auto", "auto (bars on a terminal, lines otherwise), bars, plain, none.");
DEFINE_bool(json, false, "Print a JSON summary (files, bytes, status) on stdout.");

namespace {

std::vector<std::string> SplitList(const std::string& list) {
  return absl::StrSplit(list, ',', absl::SkipWhitespace());
}

// Overwrites the token in this process's argv so `ps` and /proc/<pid>/cmdline stop showing it.
void ScrubTokenFromArgv(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    char* value = nullptr;
    for (const char* prefix : {"--hf_token=", "-hf_token="}) {
      if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) {
        value = argv[i] + std::strlen(prefix);
      }
    }
    if ((std::strcmp(argv[i], "--hf_token") == 0 || std::strcmp(argv[i], "-hf_token") == 0) &&
        i + 1 < argc) {
      value = argv[i + 1];
    }
    if (value != nullptr) std::memset(value, 'x', std::strlen(value));
  }
}

// Exit 1, as every tool's usage errors; with --json also JSON on stdout, as a failed download's.
int Usage(const std::string& message) {
  std::fprintf(stderr, "download_assets: %s\n(see --help)\n", message.c_str());
  if (FLAGS_json) titan::PrintJsonError(message);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  titan::CheckStdoutAtExit("download_assets");
  std::vector<char*> original_argv(argv, argv + argc);
  titan::ParseToolFlags(
      "download_assets --repo_id=ORG/NAME --assets=tokenizer,config,safetensors,index,all "
      "[--revision=main] [--include=GLOBS] [--exclude=GLOBS] [--local_dir=assets/hf] "
      "[--hf_token=...] [--offline] [--verify] [--json]",
      &argc, &argv);
  ScrubTokenFromArgv(static_cast<int>(original_argv.size()), original_argv.data());

  absl::StatusOr<std::string> token = titan::FindHubToken(FLAGS_hf_token);
  FLAGS_hf_token.assign(FLAGS_hf_token.size(), 'x');
  if (!token.ok()) return Usage(std::string(token.status().message()));
  titan::DownloadOptions options;
  options.token = *std::move(token);
  if (argc > 1) return Usage(absl::StrCat("unexpected argument \"", argv[1], "\""));
  if (FLAGS_repo_id.empty()) return Usage("--repo_id=ORG/NAME is required");
  // An empty one would put NAME/ in the filesystem root ("" + "/" + NAME).
  if (FLAGS_local_dir.empty()) return Usage("--local_dir: expected a folder, got an empty string");
  if (FLAGS_assets.empty() && FLAGS_include.empty()) {
    return Usage("say what to fetch: --assets=tokenizer,config,safetensors,index,all and/or "
                 "--include=GLOBS");
  }
  if (absl::Status status = titan::ParseAssets(FLAGS_assets, &options.selection); !status.ok()) {
    return Usage(std::string(status.message()));
  }
  const std::tuple<const char*, int, int> kCounts[] = {
      {"max_workers", FLAGS_max_workers, 1},
      {"max_retries", FLAGS_max_retries, 0},
      {"retry_base_ms", FLAGS_retry_base_ms, 0},
      {"retry_max_ms", FLAGS_retry_max_ms, 0},
      {"connect_timeout_s", FLAGS_connect_timeout_s, 1},
      {"stall_timeout_s", FLAGS_stall_timeout_s, 1}};
  for (const auto& [name, value, least] : kCounts) {
    if (value < least) {
      return Usage(absl::StrCat("--", name, ": expected ", least, " or more, got ", value));
    }
  }
  if (FLAGS_retry_base_ms > FLAGS_retry_max_ms) {
    return Usage(absl::StrCat("--retry_base_ms=", FLAGS_retry_base_ms,
                              " is longer than --retry_max_ms=", FLAGS_retry_max_ms,
                              ": the first retry delay cannot exceed the longest; lower "
                              "--retry_base_ms or raise --retry_max_ms"));
  }
  options.selection.include = SplitList(FLAGS_include);
  options.selection.exclude = SplitList(FLAGS_exclude);
  if (absl::Status status = titan::CheckGlobs(options.selection); !status.ok()) {
    return Usage(std::string(status.message()));
  }
  absl::StatusOr<std::string> endpoint = titan::HubEndpointFromEnv();
  if (!endpoint.ok()) return Usage(std::string(endpoint.status().message()));
  options.endpoint = *std::move(endpoint);
  options.repo_id = FLAGS_repo_id;
  options.revision = FLAGS_revision;
  std::string local_dir = FLAGS_local_dir;
  const char* invocation_dir = std::getenv("BUILD_WORKING_DIRECTORY");  // set by `bazel run`
  if (!local_dir.empty() && local_dir[0] != '/' && invocation_dir != nullptr) {
    local_dir = absl::StrCat(invocation_dir, "/", local_dir);
  }
  const size_t slash = FLAGS_repo_id.find('/');
  options.local_dir = absl::StrCat(local_dir, "/", FLAGS_repo_id.substr(slash + 1));
  options.offline = FLAGS_offline;
  options.verify = FLAGS_verify;
  options.max_workers = FLAGS_max_workers;
  options.max_retries = FLAGS_max_retries;
  options.retry_base_delay = absl::Milliseconds(FLAGS_retry_base_ms);
  options.retry_max_delay = absl::Milliseconds(FLAGS_retry_max_ms);
  options.connect_timeout = absl::Seconds(FLAGS_connect_timeout_s);
  options.stall_timeout = absl::Seconds(FLAGS_stall_timeout_s);
  if (FLAGS_progress == "none") {
    options.progress_out = nullptr;
  } else if (FLAGS_progress == "bars" || FLAGS_progress == "plain" || FLAGS_progress == "auto") {
    options.progress_bars =
        FLAGS_progress == "bars" || (FLAGS_progress == "auto" && ::isatty(STDERR_FILENO));
  } else {
    return Usage("--progress: expected auto, bars, plain or none, got \"" + FLAGS_progress + "\"");
  }

  const titan::DownloadReport report = titan::DownloadAssets(options);
  if (FLAGS_json) std::cout << titan::DownloadReportJson(report) << "\n";
  if (!report.status.ok()) {
    std::fprintf(stderr, "download_assets: %s\n", std::string(report.status.message()).c_str());
    return 1;
  }
  int downloaded = 0;
  for (const titan::FileReport& file : report.files) {
    downloaded += file.outcome == titan::FileOutcome::kDownloaded;
  }
  if (downloaded == 0) {
    std::fprintf(stderr, "download_assets: everything is up to date: %zu files in %s\n",
                 report.files.size(), report.local_dir.c_str());
  } else {
    std::fprintf(stderr,
                 "download_assets: %d files downloaded (%s in %.1f s), %zu up to date, in %s\n",
                 downloaded, titan::HumanBytes(report.bytes_fetched).c_str(),
                 absl::ToDoubleSeconds(report.elapsed), report.files.size() - downloaded,
                 report.local_dir.c_str());
  }
  return 0;
}
