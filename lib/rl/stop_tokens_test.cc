#include "lib/rl/stop_tokens.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr NoGenerationEos kGenerate = NoGenerationEos::kNoStop;
constexpr NoGenerationEos kTrain = NoGenerationEos::kModelEos;

// A model of 300 rows whose eos_token_id is 2 and generation config `generation_config`.
ModelInfo Model300(const std::string& generation_config = "null") {
  ModelInfo model;
  model.args.vocab_size = 300;
  model.eos_token_id = 2;
  model.hf_generation_config = nlohmann::json::parse(generation_config);
  return model;
}

TEST(StopTokensTest, GenerationConfigEosListIsEveryStopId) {
  absl::StatusOr<StopTokens> stop =
      StopTokensOf(Model300(R"({"eos_token_id": [7, 290], "bos_token_id": 1})"), kTrain);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_THAT(stop->ids, ElementsAre(7, 290));
  EXPECT_EQ(stop->source, "the model's generation_config.json eos_token_id");
  stop = StopTokensOf(Model300(R"({"eos_token_id": 9})"), kGenerate);
  ASSERT_TRUE(stop.ok()) << stop.status();
  EXPECT_THAT(stop->ids, ElementsAre(9));
}

TEST(StopTokensTest, WithoutGenerationConfigTheModelsEos) {
  // transformers builds a generation config from config.json when the folder has none.
  for (const NoGenerationEos no_eos : {kGenerate, kTrain}) {
    for (const std::string generation_config : {"null", "[]"}) {
      absl::StatusOr<StopTokens> stop = StopTokensOf(Model300(generation_config), no_eos);
      ASSERT_TRUE(stop.ok()) << generation_config << ": " << stop.status();
      EXPECT_THAT(stop->ids, ElementsAre(2)) << generation_config;
      EXPECT_EQ(stop->source, "the model's eos_token_id") << generation_config;
    }
  }
  // config.json's eos_token_id may be a list too (Llama 3.1's).
  ModelInfo model = Model300();
  model.eos_token_id = nlohmann::json::array({5, 6});
  EXPECT_THAT(StopTokensOf(model, kGenerate)->ids, ElementsAre(5, 6));
}

TEST(StopTokensTest, GenerationConfigWithoutEosStopsNowhereInGenerateOnly) {
  for (const std::string generation_config :
       {R"({"bos_token_id": 1})", R"({"eos_token_id": null})", R"({"eos_token_id": []})"}) {
    // As transformers' generate, which uses an existing generation_config.json as it is.
    absl::StatusOr<StopTokens> stop = StopTokensOf(Model300(generation_config), kGenerate);
    ASSERT_TRUE(stop.ok()) << generation_config << ": " << stop.status();
    EXPECT_TRUE(stop->ids.empty()) << generation_config;
    EXPECT_EQ(stop->source,
              "the model's generation_config.json names no eos_token_id: responses run to "
              "max_new_tokens, as transformers' generate");
    // Training's responses end at the model's EOS.
    stop = StopTokensOf(Model300(generation_config), kTrain);
    ASSERT_TRUE(stop.ok()) << generation_config << ": " << stop.status();
    EXPECT_THAT(stop->ids, ElementsAre(2)) << generation_config;
    EXPECT_EQ(stop->source,
              "the model's eos_token_id; its generation_config.json names none, and a training "
              "run's responses need an end");
  }
}

TEST(StopTokensTest, BadIdsAreRefusedNamingWhereTheyWereRead) {
  for (const std::string eos : {"300", "[1, -1]", "\"</s>\"", "[1.5]"}) {
    absl::StatusOr<StopTokens> stop =
        StopTokensOf(Model300(R"({"eos_token_id": )" + eos + "}"), kGenerate);
    ASSERT_FALSE(stop.ok()) << eos;
    EXPECT_THAT(stop.status().message(),
                HasSubstr("the model's generation_config.json eos_token_id: expected token ids "
                          "below the model's vocab size 300"))
        << eos;
    ModelInfo model = Model300();
    model.eos_token_id = nlohmann::json::parse(eos);
    EXPECT_THAT(StopTokensOf(model, kTrain).status().message(),
                HasSubstr("the model's eos_token_id: "))
        << eos;
  }
  ModelInfo no_eos = Model300();
  no_eos.eos_token_id = nullptr;
  EXPECT_THAT(StopTokensOf(no_eos, kGenerate).status().message(), HasSubstr("names no EOS token"));
}

}  // namespace
}  // namespace titan
