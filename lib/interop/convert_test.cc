#include "lib/interop/convert.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/interop/load_weights.h"
#include "lib/checkpoint/test_dir.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/directory.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

Llama3ModelInfo SmallModel() {
  Llama3ModelInfo info;
  info.args.dim = 32;
  info.args.n_layers = 2;
  info.args.n_heads = 4;
  info.args.n_kv_heads = 2;
  info.args.vocab_size = 40;
  info.args.multiple_of = 16;
  info.args.max_seq_len = 128;
  info.args.rope_scaling = {8, 1, 4, 32};
  info.bos_token_id = 1;
  info.eos_token_id = 2;
  return info;
}

NamedTensors RandomWeights(const Llama3Args& args, int seed) {
  at::manual_seed(seed);
  NamedTensors model;
  for (const auto& [name, shape] : Llama3ParameterShapes(args)) {
    model.emplace_back(name, at::randn(shape));
  }
  return model;
}

// Saves a titan step; `describe` adds the "model" entry convert_checkpoint writes.
NamedTensors SaveTitan(const std::string& root, int64_t step, const Llama3ModelInfo& info,
                       bool describe) {
  CheckpointState state;
  state.model = RandomWeights(info.args, 7);
  if (describe) state.extra["model"] = Llama3ModelInfoToJson(info);
  EXPECT_TRUE(CheckpointManager(root, 0).Save(step, state, /*model_only=*/true).ok());
  return state.model;
}

const at::Tensor& Named(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [tensor_name, tensor] : tensors) {
    if (tensor_name == name) return tensor;
  }
  ADD_FAILURE() << "no tensor " << name;
  return tensors.front().second;
}

void ExpectBitwiseEqual(const NamedTensors& actual, const NamedTensors& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].first, expected[i].first);
    EXPECT_EQ(actual[i].second.scalar_type(), expected[i].second.scalar_type());
    EXPECT_TRUE(actual[i].second.equal(expected[i].second)) << actual[i].first;
  }
}

TEST(ConvertTest, TitanToShardedHfAndBackIsBitwiseIdentical) {
  const Llama3ModelInfo info = SmallModel();
  const std::string titan = TestDir("titan"), hf = TestDir("hf"), back = TestDir("back");
  const NamedTensors weights = SaveTitan(titan, 30, info, /*describe=*/true);

  ConvertOptions to_hf;
  to_hf.from = CheckpointFormat::kTitan;
  to_hf.to = CheckpointFormat::kHf;
  to_hf.max_shard_bytes = 8000;
  absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, hf, to_hf);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->input, titan + "/step-30");
  EXPECT_EQ(summary->tensors, static_cast<int64_t>(weights.size()));
  EXPECT_GT(summary->files.size(), 4u);  // Several shards, the index and two configs.
  EXPECT_TRUE(PathExists(hf + "/model.safetensors.index.json"));
  EXPECT_THAT(summary->files.front(), ::testing::StartsWith("model-00001-of-000"));

  // The HF side: its names, its q/k layout, its config.
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->format(), CheckpointFormat::kHf);
  EXPECT_TRUE((*reader)->Verify().empty());
  const at::Tensor& wq = Named(weights, "layers.0.attention.wq.weight");
  EXPECT_TRUE((*reader)->Get("model.layers.0.self_attn.q_proj.weight")->equal(
      InterleavedToRotateHalf(wq, info.args.n_heads)));
  const json config = (*reader)->description();
  EXPECT_EQ(config.at("rope_scaling").at("original_max_position_embeddings"), 32);
  EXPECT_EQ(config.at("torch_dtype"), "float32");
  EXPECT_EQ(config.at("intermediate_size"), info.args.ffn_hidden_dim());

  ConvertOptions to_titan;
  to_titan.to = CheckpointFormat::kTitan;
  summary = ConvertCheckpoint(hf, back, to_titan);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->output, back + "/step-0");
  absl::StatusOr<CheckpointState> loaded = CheckpointManager(back, 0).Load(0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectBitwiseEqual(loaded->model, weights);
  absl::StatusOr<Llama3ModelInfo> described =
      Llama3ModelInfoFromJson(loaded->extra.at("model"), "state.model");
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(Llama3HfConfig(*described, "float32"), Llama3HfConfig(info, "float32"));
}

TEST(ConvertTest, TrainerCheckpointShapesNameTheFlavorAndDtypeConverts) {
  Llama3ModelInfo info;
  info.args = *Llama3Flavor("debugmodel");
  info.args.vocab_size = 300;
  const std::string titan = TestDir("titan"), hf = TestDir("hf");
  const NamedTensors weights = SaveTitan(titan, 5, info, /*describe=*/false);

  ConvertOptions options;
  options.dtype = "bf16";
  absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan + "/step-5", hf, options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->flavor, "debugmodel");
  EXPECT_THAT(summary->files, ElementsAre("model.safetensors", "config.json",
                                          "generation_config.json"));
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->description().at("torch_dtype"), "bfloat16");
  EXPECT_EQ((*reader)->description().at("vocab_size"), 300);
  EXPECT_TRUE((*reader)->Get("model.norm.weight")->equal(Named(weights, "norm.weight").to(at::kBFloat16)));
  uint64_t bytes = 0;
  for (const TensorInfo& tensor : (*reader)->tensors()) bytes += tensor.bytes;
  EXPECT_EQ(summary->bytes, bytes);

  options.flavor = "8B";
  const std::string message(ConvertCheckpoint(titan, TestDir("other"), options).status().message());
  EXPECT_THAT(message, HasSubstr("step-5: does not hold a Llama 3 8B: missing tensors: layers.6."));
}

TEST(ConvertTest, ExplainsWhatIsWrong) {
  const Llama3ModelInfo info = SmallModel();
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 1, info, /*describe=*/false);
  ConvertOptions options;
  EXPECT_THAT(ConvertCheckpoint(titan, out, options).status().message(),
              HasSubstr("shapes match no llama3 flavor"));

  // A described model whose tensors disagree: every problem in one message.
  CheckpointState state;
  state.model = RandomWeights(info.args, 1);
  for (auto it = state.model.begin(); it != state.model.end(); ++it) {
    if (it->first == "layers.0.attention.wq.weight") {
      state.model.erase(it);
      break;
    }
  }
  ASSERT_EQ(state.model[2].first, "output.weight");
  state.model[2].second = at::zeros({3});
  state.model.emplace_back("extra.weight", at::zeros({1}));
  state.extra["model"] = Llama3ModelInfoToJson(info);
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(2, state, true).ok());
  const std::string message(ConvertCheckpoint(titan, out, options).status().message());
  EXPECT_THAT(message, HasSubstr("missing tensors: layers.0.attention.wq.weight"));
  EXPECT_THAT(message, HasSubstr("unexpected tensors: extra.weight"));
  EXPECT_THAT(message, HasSubstr("output.weight is [3], expected [40, 32]"));

  ASSERT_TRUE(MakeDirectories(out).ok());
  ASSERT_TRUE(WriteFileAtomically(out + "/x", "x").ok());
  SaveTitan(titan, 3, info, /*describe=*/true);
  EXPECT_THAT(ConvertCheckpoint(titan, out, options).status().message(),
              HasSubstr("exists and is not empty"));
  options.dtype = "fp16";
  EXPECT_THAT(ConvertCheckpoint(titan, out, options).status().message(),
              HasSubstr("expected keep, bf16 or fp32"));
  EXPECT_THAT(ConvertCheckpoint(TestDir("none"), out, ConvertOptions()).status().message(),
              HasSubstr("not a directory"));
}

// Every file of a directory, name -> bytes.
std::map<std::string, std::string> ReadFiles(const std::string& dir) {
  std::map<std::string, std::string> files;
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(dir);
  EXPECT_TRUE(names.ok()) << names.status();
  for (const std::string& name : names.value_or(std::vector<std::string>())) {
    absl::StatusOr<std::string> bytes = ReadFile(dir + "/" + name);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    files[name] = bytes.value_or("");
  }
  return files;
}

// The export of a model in memory against convert_checkpoint's titan -> hf path for the same
// weights and description: the same files, byte for byte, tensor for tensor, field for field.
void ExpectSameExport(const std::string& exported, const std::string& converted) {
  const std::map<std::string, std::string> exported_files = ReadFiles(exported);
  const std::map<std::string, std::string> converted_files = ReadFiles(converted);
  ASSERT_EQ(exported_files.size(), converted_files.size());
  for (const auto& [name, bytes] : converted_files) {
    ASSERT_TRUE(exported_files.count(name)) << name;
    EXPECT_TRUE(exported_files.at(name) == bytes) << name << " differs";
  }
  absl::StatusOr<std::unique_ptr<CheckpointReader>> expected = CheckpointReader::Open(converted);
  absl::StatusOr<std::unique_ptr<CheckpointReader>> actual = CheckpointReader::Open(exported);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_TRUE(actual.ok()) << actual.status();
  ASSERT_EQ((*actual)->tensors().size(), (*expected)->tensors().size());
  for (const TensorInfo& tensor : (*expected)->tensors()) {
    absl::StatusOr<at::Tensor> actual_tensor = (*actual)->Get(tensor.name);
    ASSERT_TRUE(actual_tensor.ok()) << actual_tensor.status();
    EXPECT_EQ(actual_tensor->scalar_type(), tensor.scalar_type) << tensor.name;
    EXPECT_TRUE(actual_tensor->equal(*(*expected)->Get(tensor.name))) << tensor.name;
  }
  const json& config = (*actual)->description();
  for (const auto& [key, value] : (*expected)->description().items()) {
    EXPECT_EQ(config.at(key), value) << "config.json: " << key;
  }
}

TEST(SaveLlama3HfTest, WritesWhatConvertWritesAndLoadsBackBitwise) {
  const Llama3ModelInfo info = SmallModel();
  const std::string titan = TestDir("titan"), converted = TestDir("converted");
  const std::string run = TestDir("run"), exported = run + "/hf-final";  // run/ does not exist.
  const NamedTensors weights = SaveTitan(titan, 9, info, /*describe=*/true);

  ConvertOptions to_hf;
  to_hf.max_shard_bytes = 8000;
  ASSERT_TRUE(ConvertCheckpoint(titan, converted, to_hf).ok());
  HfExportOptions options;
  options.max_shard_bytes = 8000;
  const absl::Status saved = SaveLlama3Hf(weights, info, at::kFloat, exported, options);
  ASSERT_TRUE(saved.ok()) << saved;
  EXPECT_TRUE(PathExists(exported + "/model.safetensors.index.json"));  // Sharded, as asked.
  ExpectSameExport(exported, converted);
  EXPECT_THAT(*ListDirectory(run), ElementsAre("hf-final"));  // No temporary left beside it.

  // initial_load_in_hf reads it back into a model's parameters: the very tensors exported.
  NamedTensors loaded;
  for (const auto& [name, tensor] : weights) loaded.emplace_back(name, at::zeros_like(tensor));
  std::vector<ParamRef> params;
  for (auto& [name, tensor] : loaded) params.push_back({name, &tensor});
  const absl::Status load = LoadLlama3Weights(exported, /*in_hf=*/true, info.args, params);
  ASSERT_TRUE(load.ok()) << load;
  ExpectBitwiseEqual(loaded, weights);
}

TEST(SaveLlama3HfTest, CastsAsConvertsDtypeDoes) {
  Llama3ModelInfo info = SmallModel();
  info.args.tie_word_embeddings = true;
  const std::string titan = TestDir("titan"), converted = TestDir("converted");
  const std::string exported = TestDir("exported");
  const NamedTensors weights = SaveTitan(titan, 1, info, /*describe=*/true);
  ConvertOptions to_hf;
  to_hf.dtype = "bf16";
  ASSERT_TRUE(ConvertCheckpoint(titan, converted, to_hf).ok());
  const absl::Status saved = SaveLlama3Hf(weights, info, at::kBFloat16, exported);
  ASSERT_TRUE(saved.ok()) << saved;
  ExpectSameExport(exported, converted);
  absl::StatusOr<std::string> config = ReadFile(exported + "/config.json");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(json::parse(*config).at("torch_dtype"), "bfloat16");
  EXPECT_EQ(json::parse(*config).at("tie_word_embeddings"), true);
}

TEST(SaveLlama3HfTest, LeavesNothingHalfWritten) {
  const Llama3ModelInfo info = SmallModel();
  const std::string root = TestDir("run"), exported = root + "/hf";
  NamedTensors weights = RandomWeights(info.args, 3);

  // A crash mid-export leaves only a temporary, which the next export removes.
  ASSERT_TRUE(MakeDirectories(exported + ".tmp-999999").ok());
  ASSERT_TRUE(WriteFileAtomically(exported + ".tmp-999999/model.safetensors", "partial").ok());
  ASSERT_TRUE(SaveLlama3Hf(weights, info, at::kFloat, exported).ok());
  EXPECT_THAT(*ListDirectory(root), ElementsAre("hf"));

  // An existing export is not overwritten.
  EXPECT_EQ(SaveLlama3Hf(weights, info, at::kFloat, exported).code(),
            absl::StatusCode::kAlreadyExists);

  // A model that is not the one described fails before anything is written.
  weights.erase(std::find_if(weights.begin(), weights.end(),
                             [](const auto& named) { return named.first == "output.weight"; }));
  const std::string other = root + "/other";
  const std::string message(SaveLlama3Hf(weights, info, at::kFloat, other).message());
  EXPECT_THAT(message, HasSubstr("model exported to " + other + ": does not hold a Llama 3"));
  EXPECT_THAT(message, HasSubstr("missing tensors: output.weight"));
  EXPECT_THAT(*ListDirectory(root), ElementsAre("hf"));

  // A failure while writing (a tokenizer folder without tokenizer files) removes the temporary.
  weights = RandomWeights(info.args, 3);
  HfExportOptions options;
  options.tokenizer_dir = TestDir("no_tokenizer");
  ASSERT_TRUE(MakeDirectories(options.tokenizer_dir).ok());
  EXPECT_EQ(SaveLlama3Hf(weights, info, at::kFloat, other, options).code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(*ListDirectory(root), ElementsAre("hf"));
}

TEST(ConvertTest, ParsesByteSizes) {
  EXPECT_EQ(*ParseByteSize("5GB"), 5'000'000'000u);
  EXPECT_EQ(*ParseByteSize("64KiB"), 65536u);
  EXPECT_EQ(*ParseByteSize("1000"), 1000u);
  EXPECT_FALSE(ParseByteSize("5 GB").ok());
  EXPECT_FALSE(ParseByteSize("0").ok());
  EXPECT_FALSE(ParseByteSize("GB").ok());
}

}  // namespace
}  // namespace titan
