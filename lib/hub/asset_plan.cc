#include "lib/hub/asset_plan.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/hub/repo_glob.h"
#include "lib/util/json_file.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json",
                                           "special_tokens_map.json", "tokenizer.model",
                                           "original/tokenizer.model"};
constexpr const char* kConfigFiles[] = {"config.json", "generation_config.json"};
constexpr char kSingleSafetensors[] = "model.safetensors";

absl::StatusOr<std::vector<RepoGlob>> CompileGlobs(absl::string_view flag,
                                                   const std::vector<std::string>& globs) {
  std::vector<RepoGlob> compiled;
  for (const std::string& glob : globs) {
    absl::StatusOr<RepoGlob> one = RepoGlob::Compile(glob);
    if (!one.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", one.status().message()));
    }
    compiled.push_back(*std::move(one));
  }
  return compiled;
}

bool MatchesAny(const std::vector<RepoGlob>& globs, const std::string& path) {
  return std::any_of(globs.begin(), globs.end(),
                     [&](const RepoGlob& glob) { return glob.Matches(path); });
}

std::string Listing(const RepoSnapshot& snapshot) {
  std::vector<std::string> names;
  for (const RemoteFile& file : snapshot.files) names.push_back(file.path);
  return names.empty() ? "no files" : absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status ParseAssets(absl::string_view assets, AssetSelection* selection) {
  for (absl::string_view raw : absl::StrSplit(assets, ',', absl::SkipWhitespace())) {
    const absl::string_view asset = absl::StripAsciiWhitespace(raw);
    if (asset == "tokenizer") {
      selection->tokenizer = true;
    } else if (asset == "config") {
      selection->config = true;
    } else if (asset == "safetensors") {
      selection->safetensors = true;
    } else if (asset == "index") {
      selection->index = true;
    } else if (asset == "all") {
      selection->all = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--assets: unknown asset \"", asset,
          "\"; expected a comma-separated list of tokenizer, config, safetensors, index, all"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGlobs(const AssetSelection& selection) {
  absl::Status status = CompileGlobs("include", selection.include).status();
  if (status.ok()) status = CompileGlobs("exclude", selection.exclude).status();
  return status;
}

bool NeedsIndex(const AssetSelection& selection) {
  return selection.safetensors && !selection.all;
}

absl::StatusOr<std::vector<std::string>> ShardsFromIndex(absl::string_view index_json,
                                                         absl::string_view source) {
  absl::StatusOr<nlohmann::json> parsed = ParseJsonText(index_json, std::string(source));
  if (!parsed.ok()) return absl::DataLossError(parsed.status().message());
  const nlohmann::json& index = *parsed;
  const auto weight_map = index.is_object() ? index.find("weight_map") : index.end();
  if (!index.is_object() || weight_map == index.end() || !weight_map->is_object()) {
    return absl::DataLossError(
        absl::StrCat(source, ": expected a JSON object with a \"weight_map\" object"));
  }
  std::vector<std::string> shards;
  for (const auto& [tensor, shard] : weight_map->items()) {
    if (!shard.is_string()) {
      return absl::DataLossError(absl::StrCat(source, ": \"weight_map\": \"", tensor,
                                              "\": expected a file name string"));
    }
    shards.push_back(shard.get<std::string>());
  }
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  for (const std::string& shard : shards) {
    if (absl::Status status = ValidateRemotePath(shard); !status.ok()) {
      return absl::PermissionDeniedError(absl::StrCat(source, ": ", status.message()));
    }
  }
  return shards;
}

absl::StatusOr<std::vector<RemoteFile>> SelectFiles(const RepoSnapshot& snapshot,
                                                    const AssetSelection& selection,
                                                    absl::string_view index_json) {
  absl::flat_hash_set<std::string> in_repo;
  for (const RemoteFile& file : snapshot.files) in_repo.insert(file.path);
  absl::flat_hash_set<std::string> wanted;
  const auto add_group = [&](absl::string_view group, auto&& names) -> absl::Status {
    bool any = false;
    for (const auto& name : names) {
      if (in_repo.contains(name)) {
        wanted.insert(name);
        any = true;
      }
    }
    if (any) return absl::OkStatus();
    return absl::NotFoundError(absl::StrCat("--assets=", group, ": the repo has none of ",
                                            absl::StrJoin(names, ", "), "; it holds ",
                                            Listing(snapshot)));
  };
  if (selection.tokenizer) {
    if (absl::Status status = add_group("tokenizer", kTokenizerFiles); !status.ok()) return status;
  }
  if (selection.config) {
    if (absl::Status status = add_group("config", kConfigFiles); !status.ok()) return status;
  }
  if (selection.index || (selection.safetensors && in_repo.contains(kSafetensorsIndex))) {
    const std::vector<std::string> index_name = {kSafetensorsIndex};
    if (absl::Status status = add_group("index", index_name); !status.ok()) return status;
  }
  if (selection.safetensors && !selection.all) {
    std::vector<std::string> shards = {kSingleSafetensors};
    if (in_repo.contains(kSafetensorsIndex)) {
      absl::StatusOr<std::vector<std::string>> listed = ShardsFromIndex(index_json, kSafetensorsIndex);
      if (!listed.ok()) return listed.status();
      shards = *std::move(listed);
      for (const std::string& shard : shards) {
        if (!in_repo.contains(shard)) {
          return absl::NotFoundError(absl::StrCat(kSafetensorsIndex, ": names shard \"", shard,
                                                  "\", which the repo does not hold"));
        }
      }
    }
    if (absl::Status status = add_group("safetensors", shards); !status.ok()) return status;
  }
  absl::StatusOr<std::vector<RepoGlob>> include = CompileGlobs("include", selection.include);
  if (!include.ok()) return include.status();
  absl::StatusOr<std::vector<RepoGlob>> exclude = CompileGlobs("exclude", selection.exclude);
  if (!exclude.ok()) return exclude.status();
  for (const RemoteFile& file : snapshot.files) {
    if (selection.all || MatchesAny(*include, file.path)) wanted.insert(file.path);
  }
  std::vector<RemoteFile> files;
  for (const RemoteFile& file : snapshot.files) {
    if (wanted.contains(file.path) && !MatchesAny(*exclude, file.path)) {
      files.push_back(file);
    }
  }
  return files;
}

}  // namespace titan
