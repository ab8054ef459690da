#include "lib/util/saved_json_field.h"

#include "gtest/gtest.h"

namespace titan {
namespace {

const nlohmann::json kState = nlohmann::json::parse(
    R"({"train_state": {"step": 3, "lr": 0.5}, "names": ["a", 1], "kind": "train"})");

TEST(SavedJsonFieldTest, ReadsNestedFieldsOfTheirType) {
  EXPECT_EQ(*SavedJsonField<int64_t>(kState, "m.json", "state", "train_state.step"), 3);
  EXPECT_EQ(*SavedJsonField<std::string>(kState, "m.json", "state", "kind"), "train");
  EXPECT_EQ(*SavedJsonField<std::string>(kState, "m.json", "state", "run_kind", "rl"), "rl");
}

TEST(SavedJsonFieldTest, AnotherTypeOrAMissingKeyNamesTheFileAndKey) {
  EXPECT_EQ(SavedJsonField<int64_t>(kState, "m.json", "state", "train_state.lr").status().message(),
            "m.json: state.train_state.lr: expected a non-negative 64-bit integer, got number");
  for (const char* step : {"-1", "18446744073709551615"}) {
    const nlohmann::json wrapped = nlohmann::json::parse(absl::StrCat(R"({"step": )", step, "}"));
    EXPECT_EQ(SavedJsonField<int64_t>(wrapped, "m.json", "state", "step").status().message(),
              "m.json: state.step: expected a non-negative 64-bit integer, got number")
        << step;
  }
  EXPECT_EQ(SavedJsonField<int64_t>(kState, "m.json", "state", "kind.step").status().message(),
            "m.json: state.kind: expected an object, got string");
  EXPECT_EQ(SavedJsonField<std::vector<std::string>>(kState, "m.json", "state", "names")
                .status()
                .message(),
            "m.json: state.names: expected a list of strings, got array");
  const absl::Status missing =
      SavedJsonField<int64_t>(kState, "m.json", "state", "train_state.ntokens").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(missing.message(), "m.json: state.train_state.ntokens is missing");
}

}  // namespace
}  // namespace titan
