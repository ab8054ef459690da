#include "lib/hub/asset_plan.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

RepoSnapshot Llama() {
  RepoSnapshot snapshot;
  snapshot.commit = "abc";
  for (const char* path :
       {".gitattributes", "README.md", "config.json", "generation_config.json",
        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
        "model.safetensors.index.json", "original/consolidated.00.pth", "original/params.json",
        "original/tokenizer.model", "special_tokens_map.json", "tokenizer.json",
        "tokenizer_config.json"}) {
    snapshot.files.push_back(RemoteFile{path, 10});
  }
  return snapshot;
}

constexpr char kIndex[] = R"({"metadata": {"total_size": 20}, "weight_map": {
    "a.weight": "model-00001-of-00002.safetensors",
    "b.weight": "model-00002-of-00002.safetensors",
    "c.weight": "model-00001-of-00002.safetensors"}})";

std::vector<std::string> Paths(const std::vector<RemoteFile>& files) {
  std::vector<std::string> paths;
  for (const RemoteFile& file : files) paths.push_back(file.path);
  return paths;
}

AssetSelection Parse(const std::string& assets) {
  AssetSelection selection;
  EXPECT_TRUE(ParseAssets(assets, &selection).ok());
  return selection;
}

TEST(ParseAssetsTest, KnownNamesOnly) {
  const AssetSelection selection = Parse("tokenizer, config,index");
  EXPECT_TRUE(selection.tokenizer && selection.config && selection.index);
  EXPECT_FALSE(selection.safetensors || selection.all);
  AssetSelection bad;
  EXPECT_THAT(std::string(ParseAssets("tokenizer,weights", &bad).message()),
              HasSubstr("unknown asset \"weights\""));
}

TEST(SelectFilesTest, Tokenizer) {
  absl::StatusOr<std::vector<RemoteFile>> files = SelectFiles(Llama(), Parse("tokenizer"), "");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(Paths(*files), ElementsAre("original/tokenizer.model", "special_tokens_map.json",
                                         "tokenizer.json", "tokenizer_config.json"));
}

TEST(SelectFilesTest, SafetensorsAreTheShardsOfTheIndex) {
  AssetSelection selection = Parse("safetensors,config");
  EXPECT_TRUE(NeedsIndex(selection));
  absl::StatusOr<std::vector<RemoteFile>> files = SelectFiles(Llama(), selection, kIndex);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(Paths(*files),
              ElementsAre("config.json", "generation_config.json",
                          "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                          "model.safetensors.index.json"));
}

TEST(SelectFilesTest, IncludeAddsAndExcludeRemoves) {
  AssetSelection selection = Parse("config");
  selection.include = {"original/*.json"};
  selection.exclude = {"generation_*"};
  absl::StatusOr<std::vector<RemoteFile>> files = SelectFiles(Llama(), selection, "");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(Paths(*files), ElementsAre("config.json", "original/params.json"));
}

TEST(SelectFilesTest, GlobsAreHubGlobs) {
  AssetSelection selection = Parse("all");
  selection.exclude = {"original/", "[^c]*"};
  absl::StatusOr<std::vector<RemoteFile>> files = SelectFiles(Llama(), selection, "");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(Paths(*files),
              ElementsAre(".gitattributes", "README.md", "generation_config.json",
                          "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                          "model.safetensors.index.json", "special_tokens_map.json",
                          "tokenizer.json", "tokenizer_config.json"));
  selection.exclude = {"\xff"};
  EXPECT_THAT(std::string(SelectFiles(Llama(), selection, "").status().message()),
              HasSubstr("--exclude: glob \""));
}

TEST(CheckGlobsTest, RefusesAGlobSelectFilesWouldRefuseAndNamesItsFlag) {
  AssetSelection selection;
  selection.include = {"*.json", "original/"};
  selection.exclude = {"[!a]*"};
  EXPECT_TRUE(CheckGlobs(selection).ok());
  selection.include.push_back("b\xfe");
  EXPECT_EQ(CheckGlobs(selection).message(),
            SelectFiles(Llama(), selection, "").status().message());
  EXPECT_THAT(CheckGlobs(selection).message(), HasSubstr("--include: glob \"b\\xfe\""));
  selection.include.pop_back();
  selection.exclude.push_back("\xc3(");
  EXPECT_THAT(CheckGlobs(selection).message(), HasSubstr("--exclude: glob \"\\xc3(\""));
}

TEST(SelectFilesTest, AllTakesEverythingButExcluded) {
  AssetSelection selection = Parse("all");
  selection.exclude = {"original/*", "*.safetensors"};
  absl::StatusOr<std::vector<RemoteFile>> files = SelectFiles(Llama(), selection, "");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->size(), 8u);
}

TEST(SelectFilesTest, SingleFileModelNeedsNoIndex) {
  RepoSnapshot snapshot;
  snapshot.files = {RemoteFile{"config.json"}, RemoteFile{"model.safetensors"}};
  absl::StatusOr<std::vector<RemoteFile>> files =
      SelectFiles(snapshot, Parse("safetensors"), "");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(Paths(*files), ElementsAre("model.safetensors"));
}

TEST(SelectFilesTest, ErrorsNameWhatIsMissing) {
  RepoSnapshot snapshot;
  snapshot.files = {RemoteFile{"config.json"}};
  EXPECT_THAT(std::string(SelectFiles(snapshot, Parse("tokenizer"), "").status().message()),
              HasSubstr("--assets=tokenizer: the repo has none of tokenizer.json"));
  RepoSnapshot llama = Llama();
  llama.files.erase(llama.files.begin() + 5);  // model-00002-of-00002.safetensors
  EXPECT_THAT(
      std::string(SelectFiles(llama, Parse("safetensors"), kIndex).status().message()),
      HasSubstr("names shard \"model-00002-of-00002.safetensors\", which the repo does not hold"));
}

TEST(ShardsFromIndexTest, RefusesBadIndexes) {
  EXPECT_THAT(std::string(ShardsFromIndex("{}", "idx.json").status().message()),
              HasSubstr("idx.json: expected a JSON object with a \"weight_map\""));
  EXPECT_THAT(
      std::string(ShardsFromIndex("{\"weight_map\": {", "idx.json").status().message()),
      HasSubstr(
          "idx.json: invalid JSON: [json.exception.parse_error.101] parse error at "
          "line 1, column 17: syntax error while parsing object key - unexpected end of input"));
  EXPECT_EQ(ShardsFromIndex(R"({"weight_map": {"a": "../evil"}})", "idx.json").status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(ShardsFromIndex(R"({"weight_map": {"a": 3}})", "i").status().message()),
              HasSubstr("\"a\": expected a file name string"));
}

}  // namespace
}  // namespace titan
