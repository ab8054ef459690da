#include "lib/rl/stop_tokens.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/data/test_util.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A model of 300 rows: past the byte tokenizer's 258 ids.
ModelInfo Model300() {
  ModelInfo model;
  model.args.vocab_size = 300;
  return model;
}
const ModelInfo kModel = Model300();

// A job whose model's HF folder (hf_assets_path) holds `generation_config`, if not empty.
JobConfig JobWithGenerationConfig(const std::string& name, const std::string& generation_config) {
  const std::string dir = FreshTestDir(name);
  if (!generation_config.empty()) {
    WriteTestFile(dir + "/generation_config.json", generation_config);
  }
  JobConfig config;
  config.mutable_model()->set_hf_assets_path(dir);
  return config;
}

TEST(StopTokensTest, GenerationConfigEosListIsEveryStopId) {
  const ByteTokenizer tokenizer;
  absl::StatusOr<StopTokens> stop = StopTokensFromConfig(
      JobWithGenerationConfig("list", R"({"eos_token_id": [7, 290], "bos_token_id": 1})"),
      tokenizer, kModel);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_THAT(stop->ids, ElementsAre(7, 290));
  EXPECT_THAT(stop->source, HasSubstr("generation_config.json eos_token_id"));
}

TEST(StopTokensTest, GenerationConfigEosIdAlone) {
  const ByteTokenizer tokenizer;
  absl::StatusOr<StopTokens> stop = StopTokensFromConfig(
      JobWithGenerationConfig("one", R"({"eos_token_id": 9})"), tokenizer, kModel);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_THAT(stop->ids, ElementsAre(9));
}

TEST(StopTokensTest, WithoutGenerationConfigEosTheTokenizersEos) {
  const ByteTokenizer tokenizer;
  for (const auto& [name, contents] : {std::pair<std::string, std::string>{"no_file", ""},
                                       {"no_key", R"({"bos_token_id": 1})"},
                                       {"null", R"({"eos_token_id": null})"}}) {
    absl::StatusOr<StopTokens> stop =
        StopTokensFromConfig(JobWithGenerationConfig(name, contents), tokenizer, kModel);
    ASSERT_TRUE(stop.ok()) << name << ": " << stop.status();
    EXPECT_THAT(stop->ids, ElementsAre(ByteTokenizer::kEos)) << name;
    EXPECT_EQ(stop->source, "the tokenizer's EOS") << name;
  }
}

TEST(StopTokensTest, InitialLoadPathInHfIsTheFolderWithoutAssets) {
  const ByteTokenizer tokenizer;
  JobConfig config = JobWithGenerationConfig("initial", R"({"eos_token_id": [5]})");
  const std::string folder = config.model().hf_assets_path();
  config.mutable_model()->clear_hf_assets_path();
  config.mutable_checkpoint()->set_initial_load_path(folder);
  config.mutable_checkpoint()->set_initial_load_in_hf(true);
  absl::StatusOr<StopTokens> stop = StopTokensFromConfig(config, tokenizer, kModel);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_THAT(stop->ids, ElementsAre(5));
  // A titan checkpoint's folder is not read.
  config.mutable_checkpoint()->set_initial_load_in_hf(false);
  EXPECT_THAT(StopTokensFromConfig(config, tokenizer, kModel)->ids,
              ElementsAre(ByteTokenizer::kEos));
}

TEST(StopTokensTest, BadIdsAreRefusedNamingTheFile) {
  const ByteTokenizer tokenizer;
  // One folder each: libtorch's std::filesystem::remove_all (which a test linking it gets) crashes
  // on a folder FreshTestDir made before.
  for (const std::string& eos : {"300", "[1, -1]", "\"</s>\"", "[1.5]"}) {
    absl::StatusOr<StopTokens> stop = StopTokensFromConfig(
        JobWithGenerationConfig(absl::StrCat("bad", eos.size()),
                                absl::StrCat(R"({"eos_token_id": )", eos, "}")),
        tokenizer, kModel);
    ASSERT_FALSE(stop.ok()) << eos;
    EXPECT_THAT(stop.status().message(),
                HasSubstr("generation_config.json: eos_token_id: expected token ids below the "
                          "model's vocab size 300"))
        << eos;
  }
  // A malformed file is warned of and passed over, as transformers does.
  absl::StatusOr<StopTokens> torn =
      StopTokensFromConfig(JobWithGenerationConfig("torn", "{"), tokenizer, kModel);
  ASSERT_TRUE(torn.ok()) << torn.status();
  EXPECT_THAT(torn->ids, ElementsAre(ByteTokenizer::kEos));
}

TEST(StopTokensTest, ACheckpointsCarriedGenerationConfigServesWithoutAnHfFolder) {
  const ByteTokenizer tokenizer;
  ModelInfo model = Model300();
  model.hf_generation_config = nlohmann::json::parse(R"({"eos_token_id": [4, 290]})");
  absl::StatusOr<StopTokens> stop = StopTokensFromConfig(JobConfig(), tokenizer, model);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_THAT(stop->ids, ElementsAre(4, 290));
  EXPECT_EQ(stop->source, "the checkpoint's generation_config.json eos_token_id");
  // An HF folder's file comes first.
  stop = StopTokensFromConfig(JobWithGenerationConfig("folder_first", R"({"eos_token_id": 9})"),
                              tokenizer, model);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_THAT(stop->ids, ElementsAre(9));
}

}  // namespace
}  // namespace titan
