#ifndef TITAN_LIB_HUB_ASSET_PLAN_H_
#define TITAN_LIB_HUB_ASSET_PLAN_H_

// Which files of a repo to fetch: named asset groups plus include/exclude globs.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/hub/hub_api.h"

namespace titan {

inline constexpr char kSafetensorsIndex[] = "model.safetensors.index.json";

struct AssetSelection {
  bool tokenizer = false;    // tokenizer.json, tokenizer_config.json, special_tokens_map.json,
                             // tokenizer.model, original/tokenizer.model
  bool config = false;       // config.json, generation_config.json
  bool safetensors = false;  // the shards the index names, and the index
  bool index = false;        // model.safetensors.index.json
  bool all = false;          // every file of the repo
  std::vector<std::string> include;  // RepoGlob globs over repo paths: added
  std::vector<std::string> exclude;  // RepoGlob globs: removed from everything above
};

// Parses "tokenizer,config,safetensors,index,all" (any subset) into `selection`.
absl::Status ParseAssets(absl::string_view assets, AssetSelection* selection);

// Compiles the include and exclude globs as SelectFiles does: its glob error, before any request.
absl::Status CheckGlobs(const AssetSelection& selection);

// True when the selection needs the safetensors index to know its files.
bool NeedsIndex(const AssetSelection& selection);

// The shard names listed in an index's "weight_map", sorted and unique.
absl::StatusOr<std::vector<std::string>> ShardsFromIndex(absl::string_view index_json,
                                                         absl::string_view source);

// The files to fetch, in listing order. `index_json` is the index's content when NeedsIndex and
// the repo has one (else empty: a repo with a single model.safetensors needs none). Errors when a
// requested group matches nothing, naming the group and what the repo holds.
absl::StatusOr<std::vector<RemoteFile>> SelectFiles(const RepoSnapshot& snapshot,
                                                    const AssetSelection& selection,
                                                    absl::string_view index_json);

}  // namespace titan

#endif  // TITAN_LIB_HUB_ASSET_PLAN_H_
