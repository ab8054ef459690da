#include "lib/interop/checkpoint_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/checkpoint/test_dir.h"
#include "lib/interop/convert.h"
#include "lib/interop/hf_config.h"
#include "lib/interop/load_weights.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

// Qwen3 at a custom shape: 2 layers of dim 64, 4/2 heads of 32, tied.
ModelInfo SmallQwen3() {
  const ModelSpec& spec = **FindModel("qwen3");
  TransformerArgs args = spec.defaults;
  args.dim = 64;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.head_dim = 32;
  args.vocab_size = 40;
  args.ffn_hidden_dim = 128;
  args.max_seq_len = 64;
  args.tie_word_embeddings = true;
  return DescribeModel(spec, args);
}

ModelInfo Flavor(const std::string& family, const std::string& flavor, int64_t vocab) {
  const ModelSpec& spec = **FindModel(family);
  TransformerArgs args = spec.Flavor(flavor).value();
  args.vocab_size = vocab;
  return DescribeModel(spec, args);
}

// Writes random weights of `info`'s model as titan step 1 of `root`; `entry` is the manifest's
// model entry (null: none, as trainer checkpoints before models were recorded).
void SaveTitan(const std::string& root, const ModelInfo& info, const json& entry) {
  CheckpointState state;
  at::manual_seed(5);
  for (const auto& [name, shape] : ParameterShapes(*info.spec, info.args)) {
    state.model.emplace_back(name, at::randn(shape));
  }
  if (!entry.is_null()) state.extra["model"] = entry;
  ASSERT_TRUE(CheckpointManager(root, 0).Save(1, state, /*model_only=*/true).ok());
}

// A shape read from an HF folder (the trainer's from_checkpoint) keeps its pad id and
// generation_config.json, and so does the titan manifest's model entry it is saved as.
TEST(CheckpointModelTest, HfSettingsTravelInTheModelEntry) {
  const std::string hf = TestDir("hf");
  ASSERT_TRUE(MakeDirectories(hf).ok());
  ModelInfo info = SmallQwen3();
  info.pad_token_id = 39;
  const json generation = {{"do_sample", true}, {"temperature", 0.7}, {"eos_token_id", {1, 2}}};
  ASSERT_TRUE(WriteFileAtomically(hf + "/config.json", HfConfig(info, "float32").dump()).ok());
  ASSERT_TRUE(WriteFileAtomically(hf + "/generation_config.json", generation.dump()).ok());
  absl::StatusOr<ModelInfo> read = DescribeHfConfig(hf, "qwen3");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->pad_token_id, 39);
  EXPECT_EQ(read->hf_generation_config, generation);

  absl::StatusOr<ModelInfo> entry = ModelInfoFromJson(ModelInfoToJson(*read), "entry");
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(entry->pad_token_id, 39);
  EXPECT_EQ(entry->hf_generation_config, generation);
  // Entries of models without them (a flavor, older checkpoints) hold neither key.
  const json plain = ModelInfoToJson(SmallQwen3());
  EXPECT_FALSE(plain.contains("pad_token_id"));
  EXPECT_FALSE(plain.contains("hf_generation_config"));
  EXPECT_TRUE(ModelInfoFromJson(plain, "entry")->hf_generation_config.is_null());
  json bad = plain;
  bad["hf_generation_config"] = "sampling";
  EXPECT_THAT(ModelInfoFromJson(bad, "entry").status().message(),
              HasSubstr("entry: hf_generation_config: expected an object, got string"));
}

// A Hugging Face folder of SmallQwen3 whose config.json ties the head while its weights hold
// lm_head.weight: a copy of the embedding when `copy`, else a head of its own.
std::string HfWithTiedConfigAndHead(const std::string& name, bool copy) {
  ModelInfo untied = SmallQwen3();
  untied.args.tie_word_embeddings = false;
  CheckpointState state;
  at::manual_seed(5);
  for (const auto& [param, shape] : ParameterShapes(*untied.spec, untied.args)) {
    state.model.emplace_back(param, at::randn(shape));
  }
  for (auto& [param, tensor] : state.model) {
    if (copy && param == "output.weight") tensor = state.model.front().second.clone();
  }
  state.extra["model"] = ModelInfoToJson(untied);
  const std::string titan = TestDir(name + "_titan"), hf = TestDir(name);
  EXPECT_TRUE(CheckpointManager(titan, 0).Save(1, state, /*model_only=*/true).ok());
  EXPECT_TRUE(ConvertCheckpoint(titan, hf, ConvertOptions()).ok());
  json config = json::parse(std::ifstream(hf + "/config.json"));
  config["tie_word_embeddings"] = true;
  std::ofstream(hf + "/config.json") << config.dump();
  return hf;
}

// The checkpoint tensor MatchParameters reads for `titan_name`, or "".
std::string SourceOf(const std::vector<ParameterSource>& params, const std::string& titan_name) {
  for (const ParameterSource& param : params) {
    if (param.titan_name == titan_name) return param.source_name;
  }
  return "";
}

// transformers keeps such a head untied ("both are present in the checkpoints with different
// values, so we will NOT tie them"): dropping it would give another model.
TEST(CheckpointModelTest, AHeadThatDiffersFromTheEmbeddingIsReadUntied) {
  const std::string hf = HfWithTiedConfigAndHead("own_head", /*copy=*/false);
  absl::StatusOr<ModelInfo> info = DescribeCheckpointAt(hf, /*in_hf=*/true, "qwen3");  // train
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->args.tie_word_embeddings);
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  info = DescribeCheckpoint(**reader, "", "");  // convert_checkpoint
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->args.tie_word_embeddings);
  absl::StatusOr<std::vector<ParameterSource>> params = MatchParameters(**reader, *info);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(SourceOf(*params, "output.weight"), "lm_head.weight");
  // A tied model is refused the head rather than silently dropping it.
  EXPECT_THAT(
      std::string(MatchParameters(**reader, SmallQwen3()).status().message()),
      HasSubstr("first differing tensors (by their names in the files): lm_head.weight [40, 64] "
                "vs absent"));

  // A copy of the embedding is what a tied head looks like: it stays tied.
  const std::string copied = HfWithTiedConfigAndHead("copied_head", /*copy=*/true);
  info = DescribeCheckpointAt(copied, /*in_hf=*/true, "qwen3");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->args.tie_word_embeddings);
  reader = CheckpointReader::Open(copied);
  ASSERT_TRUE(reader.ok()) << reader.status();
  params = MatchParameters(**reader, SmallQwen3());
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(SourceOf(*params, "output.weight"), "");
}

// transformers loads a tied model saved as its head alone, filling the embedding from it.
TEST(CheckpointModelTest, ATiedModelSavedAsItsHeadAloneReadsTheEmbeddingFromIt) {
  const std::string hf = HfWithTiedConfigAndHead("head_alone", /*copy=*/false);
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  NamedTensors kept;
  for (const TensorInfo& tensor : (*reader)->tensors()) {
    if (tensor.name == "model.embed_tokens.weight") continue;
    kept.emplace_back(tensor.name, (*(*reader)->Get(tensor.name)).clone());
  }
  reader->reset();
  std::filesystem::remove(hf + "/model.safetensors");
  const absl::Status written = WriteSafetensors(hf + "/model.safetensors", kept);
  ASSERT_TRUE(written.ok()) << written;
  absl::StatusOr<ModelInfo> info = DescribeCheckpointAt(hf, /*in_hf=*/true, "qwen3");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(info->args.tie_word_embeddings);
  reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<std::vector<ParameterSource>> params = MatchParameters(**reader, *info);
  ASSERT_TRUE(params.ok()) << params.status();
  EXPECT_EQ(SourceOf(*params, "tok_embeddings.weight"), "lm_head.weight");
  EXPECT_EQ(SourceOf(*params, "output.weight"), "");
}

// Older transformers saved RoPE's inverse frequencies as a buffer per layer; loading drops them
// (recomputed from config.json), and so does titan.
TEST(CheckpointModelTest, RotaryInverseFrequencyBuffersAreDroppedAsTransformersDoes) {
  const std::string hf = HfWithTiedConfigAndHead("inv_freq", /*copy=*/true);
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  NamedTensors kept;
  for (const TensorInfo& tensor : (*reader)->tensors()) {
    kept.emplace_back(tensor.name, (*(*reader)->Get(tensor.name)).clone());
  }
  kept.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", at::ones({4}));
  reader->reset();
  std::filesystem::remove(hf + "/model.safetensors");
  const absl::Status written = WriteSafetensors(hf + "/model.safetensors", kept);
  ASSERT_TRUE(written.ok()) << written;
  reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<std::vector<ParameterSource>> params = MatchParameters(**reader, SmallQwen3());
  ASSERT_TRUE(params.ok()) << params.status();
  for (const ParameterSource& param : *params) {
    EXPECT_THAT(param.source_name, Not(HasSubstr("inv_freq")));
  }
}

TEST(CheckpointModelTest, DescribesRecordedModelsOfEveryFamily) {
  const std::string qwen = TestDir("qwen");
  SaveTitan(qwen, SmallQwen3(), ModelInfoToJson(SmallQwen3()));
  absl::StatusOr<ModelInfo> info = DescribeCheckpointAt(qwen, /*in_hf=*/false);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "qwen3");
  EXPECT_EQ(info->flavor, "");
  EXPECT_TRUE(SameArchitecture(info->args, SmallQwen3().args));
  EXPECT_EQ(DescribeModelInfo(*info),
            "qwen3 (dim 64, 2 layers, 4/2 heads of 32, ffn 128, vocab 40, tied, qk-norm)");

  // The trainer's [model] name must agree.
  EXPECT_TRUE(DescribeCheckpointAt(qwen + "/step-1", false, "qwen3").ok());
  EXPECT_EQ(DescribeCheckpointAt(qwen, false, "llama3").status().message(),
            qwen +
                "/step-1: holds qwen3 (dim 64, 2 layers, 4/2 heads of 32, ffn 128, vocab 40, "
                "tied, qk-norm), not a llama3 model");
  EXPECT_THAT(DescribeCheckpointAt(qwen, false, "gpt2").status().message(),
              HasSubstr("unknown model \"gpt2\"; expected one of llama3, qwen3"));

  // Its Hugging Face export says the same through config.json.
  const std::string hf = TestDir("hf");
  ASSERT_TRUE(ConvertCheckpoint(qwen, hf, ConvertOptions()).ok());
  info = DescribeCheckpointAt(hf, /*in_hf=*/true, "qwen3");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(DescribeModelInfo(*info), DescribeModelInfo(SmallQwen3()));

  // config.json alone (no weights: a shape to train from scratch) says the same.
  const std::string shape_only = TestDir("shape_only");
  std::filesystem::create_directories(shape_only);
  std::filesystem::copy_file(hf + "/config.json", shape_only + "/config.json");
  info = DescribeCheckpointAt(shape_only, /*in_hf=*/true, "qwen3");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(DescribeModelInfo(*info), DescribeModelInfo(SmallQwen3()));
  EXPECT_THAT(DescribeCheckpointAt(shape_only, true, "llama3").status().message(),
              HasSubstr(shape_only + ": holds qwen3 (dim 64"));
}

TEST(CheckpointModelTest, UnrecordedTitanCheckpointsAreMatchedAgainstEveryFlavor) {
  for (const auto& [family, flavor] : std::vector<std::pair<std::string, std::string>>{
           {"llama3", "debugmodel"}, {"qwen3", "debugmodel"}}) {
    const std::string root = TestDir(family);
    SaveTitan(root, Flavor(family, flavor, 48), nullptr);
    absl::StatusOr<ModelInfo> info = DescribeCheckpointAt(root, false);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->name(), family);
    EXPECT_EQ(info->flavor, flavor);
    EXPECT_EQ(info->args.vocab_size, 48);
  }
  const std::string custom = TestDir("custom");
  SaveTitan(custom, SmallQwen3(), nullptr);
  EXPECT_THAT(DescribeCheckpointAt(custom, false).status().message(),
              HasSubstr("custom/step-1: its manifest does not describe the model and its shapes "
                        "match no flavor of llama3: debugmodel, 1B"));
}

// The one-line descriptions leave out RoPE and the norm's epsilon: a mismatch names such fields.
TEST(CheckpointModelTest, AFlavorMismatchNamesTheFieldsThatDiffer) {
  const ModelInfo flavor = Flavor("llama3", "debugmodel", 40);
  ModelInfo other = flavor;
  other.args.rope.theta = 10000;
  other.args.norm_eps = 1e-6;
  EXPECT_EQ(ArchitectureDifferences(other.args, flavor.args),
            absl::StrCat("norm_eps 1e-06 vs 1e-05, rope_theta 10000 vs ",
                         static_cast<int64_t>(flavor.args.rope.theta)));
  EXPECT_EQ(ArchitectureDifferences(flavor.args, flavor.args), "");
  ModelInfo scaled = flavor;
  scaled.args.rope.scaling = RopeScalingType::kYarn;  // its parameters follow from the type
  EXPECT_EQ(ArchitectureDifferences(scaled.args, flavor.args), "rope_scaling yarn vs llama3");
  scaled.args.rope.scaling = RopeScalingType::kNone;  // titan's debugmodel before torchtitan's RoPE
  EXPECT_EQ(ArchitectureDifferences(scaled.args, flavor.args), "rope_scaling none vs llama3");

  // YaRN's attention_factor written at transformers' default is the same model as one left unset;
  // mscale over mscale_all_dim is compared through the factor it gives.
  ModelInfo yarn = flavor, yarn_set = flavor;
  for (ModelInfo* info : {&yarn, &yarn_set}) {
    info->args.rope.scaling = RopeScalingType::kYarn;
    info->args.rope.factor = 4;
  }
  yarn_set.args.rope.attention_factor = 0.1 * std::log(4.0) + 1;
  EXPECT_EQ(ArchitectureDifferences(yarn.args, yarn_set.args), "");
  yarn_set.args.rope.attention_factor = 1;
  EXPECT_EQ(ArchitectureDifferences(yarn.args, yarn_set.args),
            "rope_attention_factor 1.138629436111989 vs 1");
  yarn.args.rope.mscale = yarn.args.rope.mscale_all_dim = 0.707;
  EXPECT_EQ(ArchitectureDifferences(yarn.args, yarn_set.args), "");

  // convert_checkpoint --flavor: both descriptions read the same, the difference is named.
  const std::string root = TestDir("titan");
  other.flavor = "";
  SaveTitan(root, other, ModelInfoToJson(other));
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(root);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(DescribeCheckpoint(**reader, "llama3", "debugmodel").status().message(),
            absl::StrCat(root, "/step-1: holds ", DescribeModelInfo(other),
                         ", not flavor debugmodel (norm_eps 1e-06 vs 1e-05, rope_theta 10000 vs ",
                         static_cast<int64_t>(flavor.args.rope.theta), ")"));
}

// The summary names both models in one line each and at most three tensors.
TEST(CheckpointModelTest, ShapeMismatchIsAShortSummary) {
  const std::string titan = TestDir("titan"), hf = TestDir("hf");
  SaveTitan(titan, SmallQwen3(), ModelInfoToJson(SmallQwen3()));
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, ConvertOptions()).ok());
  const ModelInfo expected = Flavor("llama3", "debugmodel", 40);
  std::unique_ptr<Decoder> model =
      expected.spec->Build(expected.args, at::TensorOptions().device(at::kMeta));
  model->Materialize(at::TensorOptions().dtype(at::kFloat));

  // 61 differences: the embedding, the final norm, both layers' 18 tensors (dim 64, not 256),
  // layers 2-5 (36) and the output head absent, the 4 q/k norms unexpected.
  const std::string message(
      LoadModelWeights(hf, /*in_hf=*/true, expected, model->NamedParameters()).message());
  EXPECT_EQ(message, hf + ": checkpoint holds qwen3 (dim 64, 2 layers, 4/2 heads of 32, ffn 128, "
                          "vocab 40, tied, qk-norm), the model is llama3 debugmodel (dim 256, 6 "
                          "layers, 16/16 heads of 16, ffn 768, vocab 40); first differing "
                          "tensors (by their names in the files): model.embed_tokens.weight "
                          "[40, 64] vs [40, 256], model.norm.weight [64] vs [256], lm_head.weight "
                          "absent vs [40, 256] (58 more)");

  // The same model the checkpoint describes: only the tensors are listed.
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(titan);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ModelInfo wider = SmallQwen3();
  wider.args.ffn_hidden_dim = 192;
  EXPECT_EQ(MatchParameters(**reader, wider).status().message(),
            titan +
                "/step-1: checkpoint tensors do not match qwen3 (dim 64, 2 layers, 4/2 heads "
                "of 32, ffn 192, vocab 40, tied, qk-norm); first differing tensors: "
                "layers.0.feed_forward.w1.weight [128, 64] vs [192, 64], "
                "layers.0.feed_forward.w2.weight [64, 128] vs [64, 192], "
                "layers.0.feed_forward.w3.weight [128, 64] vs [192, 64] (3 more)");
}

}  // namespace
}  // namespace titan
