#include "lib/interop/convert.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <ios>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/test_dir.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/interop/hf_adapter.h"
#include "lib/interop/hf_config.h"
#include "lib/interop/load_weights.h"
#include "lib/interop/meta_checkpoint.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "lib/util/folder_lock.h"
#include "lib/util/json_file.h"
#include "lib/util/warning_collector.h"

namespace titan {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A custom Llama 3 shape with Llama 3.1 RoPE scaling.
ModelInfo SmallModel() {
  const ModelSpec& spec = **FindModel("llama3");
  TransformerArgs args = spec.defaults;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.vocab_size = 40;
  args.ffn_hidden_dim = 96;
  args.max_seq_len = 128;
  args.rope.scaling = RopeScalingType::kLlama3;
  args.rope.factor = 8;
  args.rope.original_max_position_embeddings = 32;
  return DescribeModel(spec, args, 1, 2);
}

// SmallModel as Meta's params.json can describe it: Llama 3.1's original length, 8192.
ModelInfo SmallMetaModel() {
  ModelInfo info = SmallModel();
  info.args.rope.original_max_position_embeddings = 8192;
  return info;
}

// A custom Qwen3 shape: head_dim 16 independent of dim / heads, qk-norm, tied.
ModelInfo SmallQwen3() {
  const ModelSpec& spec = **FindModel("qwen3");
  TransformerArgs args = spec.defaults;
  args.dim = 32;
  args.n_layers = 2;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.head_dim = 16;
  args.vocab_size = 40;
  args.ffn_hidden_dim = 64;
  args.max_seq_len = 128;
  args.tie_word_embeddings = true;
  return DescribeModel(spec, args, 1, 2);
}

NamedTensors RandomWeights(const ModelInfo& info, int seed) {
  at::manual_seed(seed);
  NamedTensors model;
  for (const auto& [name, shape] : ParameterShapes(*info.spec, info.args)) {
    model.emplace_back(name, at::randn(shape));
  }
  return model;
}

// Saves a titan step; `describe` adds the "model" entry convert_checkpoint writes.
NamedTensors SaveTitan(const std::string& root, int64_t step, const ModelInfo& info,
                       bool describe) {
  CheckpointState state;
  state.model = RandomWeights(info, 7);
  if (describe) state.extra["model"] = ModelInfoToJson(info);
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

// Flips one bit of the file's last byte (the last tensor's data).
void CorruptLastByte(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  bytes->back() ^= 0x10;
  ASSERT_TRUE(WriteFileAtomically(path, *bytes).ok());
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
  const ModelInfo info = SmallModel();
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
  EXPECT_TRUE((*reader)
                  ->Get("model.layers.0.self_attn.q_proj.weight")
                  ->equal(InterleavedToRotateHalf(wq, info.args.n_heads)));
  const json config = (*reader)->description();
  EXPECT_EQ(config.at("rope_scaling").at("original_max_position_embeddings"), 32);
  EXPECT_EQ(config.at("torch_dtype"), "float32");
  EXPECT_EQ(config.at("intermediate_size"), info.args.ffn_hidden_dim);

  ConvertOptions to_titan;
  to_titan.to = CheckpointFormat::kTitan;
  summary = ConvertCheckpoint(hf, back, to_titan);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->output, back + "/step-0");
  absl::StatusOr<CheckpointState> loaded = CheckpointManager(back, 0).Load(0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectBitwiseEqual(loaded->model, weights);
  absl::StatusOr<ModelInfo> described = ModelInfoFromJson(loaded->extra.at("model"), "state.model");
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(HfConfig(*described, "float32"), HfConfig(info, "float32"));
}

// Shards are planned as huggingface_hub's split_torch_state_dict_into_shards (save_pretrained)
// plans them: a tensor over the limit alone in a shard, before the one still being filled.
TEST(ConvertTest, ShardsAsSavePretrainedDoes) {
  // Expected: huggingface_hub 2.4.0's split_torch_state_dict_into_shards(max_shard_size=100) over
  // uint8 tensors of these sizes, in this order.
  EXPECT_THAT(PlanHfShards({30, 120, 50, 40, 200, 10, 60, 100, 1}, 100),
              ElementsAre(ElementsAre(1), ElementsAre(0, 2), ElementsAre(4), ElementsAre(3, 5),
                          ElementsAre(6), ElementsAre(7), ElementsAre(8)));
  EXPECT_THAT(PlanHfShards({}, 100),
              ElementsAre(::testing::IsEmpty()));  // model.safetensors, empty
  EXPECT_THAT(PlanHfShards({100, 1}, 100), ElementsAre(ElementsAre(0), ElementsAre(1)));

  // An export uses that plan: the feed-forward weights (12288 bytes) over the limit do not close
  // the shard being filled.
  const ModelInfo info = SmallModel();
  const std::string titan = TestDir("titan"), hf = TestDir("hf");
  SaveTitan(titan, 1, info, /*describe=*/true);
  ConvertOptions to_hf;
  to_hf.to = CheckpointFormat::kHf;
  to_hf.max_shard_bytes = 5000;
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, to_hf).ok());
  absl::StatusOr<json> index = ReadJsonFile(hf + "/model.safetensors.index.json");
  ASSERT_TRUE(index.ok()) << index.status();
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [name, file] : index->at("weight_map").items()) {
    shards[file.get<std::string>()].push_back(name);
  }
  EXPECT_EQ(shards.size(), 14u);
  // The layer's small tensors before the oversized ones and model.norm after them share a shard.
  EXPECT_THAT(shards["model-00003-of-00014.safetensors"],
              ElementsAre("model.layers.0.input_layernorm.weight",
                          "model.layers.0.post_attention_layernorm.weight",
                          "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"));
  EXPECT_THAT(shards["model-00005-of-00014.safetensors"],
              ElementsAre("model.layers.0.mlp.gate_proj.weight"));
}

// A folder with both model.safetensors and an index is read as transformers reads it: the single
// file.
TEST(ConvertTest, HfSingleFileWinsOverAnIndexAsInTransformers) {
  const ModelInfo info = SmallModel();
  const std::string sharded_titan = TestDir("sharded_titan"),
                    single_titan = TestDir("single_titan");
  const std::string hf = TestDir("hf"), single = TestDir("single");
  SaveTitan(sharded_titan, 1, info, /*describe=*/true);
  CheckpointState state;
  state.model = RandomWeights(info, 8);
  state.extra["model"] = ModelInfoToJson(info);
  ASSERT_TRUE(CheckpointManager(single_titan, 0).Save(1, state, /*model_only=*/true).ok());
  ConvertOptions sharded;
  sharded.max_shard_bytes = 8000;
  ASSERT_TRUE(ConvertCheckpoint(sharded_titan, hf, sharded).ok());
  ASSERT_TRUE(ConvertCheckpoint(single_titan, single, ConvertOptions()).ok());
  ASSERT_TRUE(PathExists(hf + "/model.safetensors.index.json"));
  absl::StatusOr<std::string> bytes = ReadFile(single + "/model.safetensors");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_TRUE(WriteFileAtomically(hf + "/model.safetensors", *bytes).ok());

  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE((*reader)->Verify().empty());
  for (const TensorInfo& tensor : (*reader)->tensors()) EXPECT_EQ(tensor.file, "model.safetensors");
  EXPECT_TRUE((*reader)->Get("model.norm.weight")->equal(Named(state.model, "norm.weight")));
}

// An index may name shards in a subfolder, as transformers joins the folder and the name; a
// name leaving the folder is refused, naming the index and the entry.
TEST(ConvertTest, HfIndexNamesShardsInsideTheFolderOnly) {
  const std::string titan = TestDir("titan"), hf = TestDir("hf"), back = TestDir("back");
  const NamedTensors weights = SaveTitan(titan, 1, SmallModel(), /*describe=*/true);
  ConvertOptions sharded;
  sharded.max_shard_bytes = 8000;
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, sharded).ok());
  const std::string index_path = hf + "/model.safetensors.index.json";
  absl::StatusOr<json> index = ReadJsonFile(index_path);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_TRUE(MakeDirectories(hf + "/sub").ok());
  std::set<std::string> shards;
  for (auto& [name, file] : index->at("weight_map").items()) {
    shards.insert(file.get<std::string>());
    file = "sub/" + file.get<std::string>();
  }
  ASSERT_GT(shards.size(), 1);
  for (const std::string& shard : shards) {
    ASSERT_TRUE(RenamePath(hf + "/" + shard, hf + "/sub/" + shard).ok());
  }
  ASSERT_TRUE(WriteFileAtomically(index_path, index->dump()).ok());

  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE((*reader)->Verify().empty());
  for (const TensorInfo& tensor : (*reader)->tensors()) {
    EXPECT_EQ(tensor.file, index->at("weight_map").at(tensor.name)) << tensor.name;
  }
  ConvertOptions to_titan;
  to_titan.to = CheckpointFormat::kTitan;
  ASSERT_TRUE(ConvertCheckpoint(hf, back, to_titan).ok());
  ExpectBitwiseEqual(CheckpointManager(back, 0).Load(0)->model, weights);

  // One shard spelled two ways is one file, as the file system (and transformers) reads it.
  const std::string shard = *shards.begin();
  json spelled = *index;
  int spellings = 0;
  for (auto& [name, file] : spelled.at("weight_map").items()) {
    if (file == "sub/" + shard && spellings++ % 2 == 0) file = ".//sub/./" + shard;
  }
  ASSERT_GT(spellings, 1);
  ASSERT_TRUE(WriteFileAtomically(index_path, spelled.dump()).ok());
  reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE((*reader)->Verify().empty());

  for (const std::string& outside :
       {"../hf/sub/" + shard, "sub/../../hf/sub/" + shard, hf + "/sub/" + shard}) {
    json escaping = *index;
    escaping["weight_map"]["model.norm.weight"] = outside;
    ASSERT_TRUE(WriteFileAtomically(index_path, escaping.dump()).ok());
    EXPECT_EQ(CheckpointReader::Open(hf).status().message(),
              index_path + ": weight_map[\"model.norm.weight\"]: \"" + outside +
                  "\" is outside the checkpoint folder (expected a path inside it)");
  }
}

// Qwen3 keeps its rotate-half q/k as they are, and its q/k norms travel under HF's names.
TEST(ConvertTest, Qwen3ToHfAndBackKeepsTensorsAsTheyAre) {
  const ModelInfo info = SmallQwen3();
  const std::string titan = TestDir("titan"), hf = TestDir("hf"), back = TestDir("back");
  const NamedTensors weights = SaveTitan(titan, 4, info, /*describe=*/true);
  absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, hf, ConvertOptions());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->model, "qwen3");
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE((*reader)
                  ->Get("model.layers.1.self_attn.q_proj.weight")
                  ->equal(Named(weights, "layers.1.attention.wq.weight")));
  EXPECT_TRUE((*reader)
                  ->Get("model.layers.0.self_attn.k_norm.weight")
                  ->equal(Named(weights, "layers.0.attention.k_norm.weight")));
  EXPECT_EQ((*reader)->Find("lm_head.weight"), nullptr);
  EXPECT_EQ((*reader)->description().at("model_type"), "qwen3");
  EXPECT_EQ((*reader)->description().at("head_dim"), 16);

  ConvertOptions to_titan;
  to_titan.to = CheckpointFormat::kTitan;
  to_titan.model = "qwen3";
  ASSERT_TRUE(ConvertCheckpoint(hf, back, to_titan).ok());
  absl::StatusOr<CheckpointState> loaded = CheckpointManager(back, 0).Load(0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectBitwiseEqual(loaded->model, weights);
  EXPECT_EQ(loaded->extra.at("model").at("name"), "qwen3");

  // --model must agree; Meta's format is Llama's only.
  to_titan.model = "llama3";
  EXPECT_THAT(ConvertCheckpoint(hf, TestDir("x"), to_titan).status().message(),
              HasSubstr("hf: holds qwen3 (dim 32, 2 layers, 4/2 heads of 16, ffn 64, vocab 40, "
                        "tied, qk-norm), not a llama3 model"));
  to_titan.model = "gpt2";
  EXPECT_THAT(ConvertCheckpoint(hf, TestDir("x"), to_titan).status().message(),
              HasSubstr("--model: unknown model \"gpt2\"; expected one of llama3, qwen3"));
  ConvertOptions to_meta;
  to_meta.to = CheckpointFormat::kMeta;
  EXPECT_THAT(ConvertCheckpoint(titan, TestDir("meta"), to_meta).status().message(),
              HasSubstr("--to=meta: qwen3 has no Meta format"));
  EXPECT_FALSE(PathExists(TestDir("meta")));
}

// What an HF folder says that titan does not model (pad_token_id, the authors' sampling defaults
// and eos list in generation_config.json) reaches the export, directly and through titan's format.
TEST(ConvertTest, HfConfigSettingsTitanDoesNotModelReachTheExport) {
  const std::string titan = TestDir("titan"), hf = TestDir("hf");
  SaveTitan(titan, 1, SmallModel(), /*describe=*/true);
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, ConvertOptions()).ok());
  json config = *ReadHfConfig(hf);
  config["pad_token_id"] = 39;
  ASSERT_TRUE(WriteFileAtomically(hf + "/config.json", config.dump(2)).ok());
  const json generation = {{"bos_token_id", 1},  {"eos_token_id", {2, 3}},
                           {"pad_token_id", 39}, {"do_sample", true},
                           {"temperature", 0.6}, {"top_p", 0.95},
                           {"top_k", 20},        {"transformers_version", "5.24.0"}};
  ASSERT_TRUE(WriteFileAtomically(hf + "/generation_config.json", generation.dump(2)).ok());

  const std::string direct = TestDir("direct"), back_titan = TestDir("back_titan");
  const std::string back = TestDir("back");
  ASSERT_TRUE(ConvertCheckpoint(hf, direct, ConvertOptions()).ok());
  ConvertOptions to_titan;
  to_titan.to = CheckpointFormat::kTitan;
  ASSERT_TRUE(ConvertCheckpoint(hf, back_titan, to_titan).ok());
  ASSERT_TRUE(ConvertCheckpoint(back_titan, back, ConvertOptions()).ok());
  for (const std::string& out : {direct, back}) {
    EXPECT_EQ(ReadHfConfig(out)->value("pad_token_id", json()), 39) << out;
    EXPECT_EQ(ReadHfGenerationConfig(out), generation) << out;
  }
}

// Without a source generation_config.json (a model from a flavor) the export builds one from the
// special ids; a malformed one is ignored, as transformers ignores it.
TEST(ConvertTest, GenerationConfigIsBuiltWhenTheSourceHasNone) {
  const std::string titan = TestDir("titan"), hf = TestDir("hf"), back = TestDir("back");
  SaveTitan(titan, 1, SmallModel(), /*describe=*/true);
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, ConvertOptions()).ok());
  const json built = {{"_from_model_config", true}, {"bos_token_id", 1}, {"eos_token_id", 2}};
  EXPECT_EQ(ReadHfGenerationConfig(hf), built);
  EXPECT_FALSE(ReadHfConfig(hf)->contains("pad_token_id"));
  ASSERT_TRUE(WriteFileAtomically(hf + "/generation_config.json", "{not json").ok());
  EXPECT_TRUE(ReadHfGenerationConfig(hf).is_null());
  ASSERT_TRUE(ConvertCheckpoint(hf, back, ConvertOptions()).ok());
  EXPECT_EQ(ReadHfGenerationConfig(back), built);
}

// Everything transformers' save_pretrained writes for a tokenizer travels with --tokenizer_dir: the
// chat template (chat_template.jinja and named ones in additional_chat_templates/) included.
TEST(ConvertTest, TokenizerDirCopiesChatTemplatesAndLegacyFiles) {
  const std::string titan = TestDir("titan"), hf = TestDir("hf"), tok = TestDir("tok");
  SaveTitan(titan, 1, SmallModel(), /*describe=*/true);
  const std::map<std::string, std::string> files = {
      {"tokenizer.json", "{}"},
      {"tokenizer_config.json", "{\"bos_token\": \"<s>\"}"},
      {"special_tokens_map.json", "{}"},
      {"added_tokens.json", "{}"},
      {"tokenizer.model", "sentencepiece bytes"},
      {"vocab.json", "{\"a\": 0}"},
      {"merges.txt", "#version: 0.2\n"},
      {"chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}"},
      {"additional_chat_templates/tool_use.jinja", "{{ tools }}"}};
  ASSERT_TRUE(MakeDirectories(tok + "/additional_chat_templates").ok());
  for (const auto& [name, contents] : files) {
    ASSERT_TRUE(WriteFileAtomically(tok + "/" + name, contents).ok());
  }
  ASSERT_TRUE(WriteFileAtomically(tok + "/additional_chat_templates/notes.txt", "x").ok());
  ConvertOptions options;
  options.tokenizer_dir = tok;
  absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, hf, options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  for (const auto& [name, contents] : files) {
    EXPECT_EQ(ReadFile(hf + "/" + name).value_or("(missing)"), contents) << name;
    EXPECT_THAT(summary->files, ::testing::Contains(name));
  }
  EXPECT_FALSE(PathExists(hf + "/additional_chat_templates/notes.txt"));

  // A malformed JSON file is refused, naming it, leaving no output: transformers fails to load it,
  // though titan does not read that tokenizer ("{}" above) and would copy it with a warning.
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    const std::string bad_tok = TestDir("bad_tok"), out = TestDir("bad_tok_out");
    ASSERT_TRUE(MakeDirectories(bad_tok).ok());
    for (const auto& [file, contents] : files) {
      if (absl::StrContains(file, "/")) continue;
      ASSERT_TRUE(WriteFileAtomically(bad_tok + "/" + file, file == name ? "{bad" : contents).ok());
    }
    options.tokenizer_dir = bad_tok;
    EXPECT_THAT(std::string(ConvertCheckpoint(titan, out, options).status().message()),
                ::testing::StartsWith(
                    absl::StrCat("--tokenizer_dir: ", bad_tok, "/", name, ": invalid JSON")));
    EXPECT_FALSE(PathExists(out + "/config.json"));
  }
}

// Meta's format is Llama 3's: read as llama3 unless another family is named.
TEST(ConvertTest, MetaCheckpointsAreLlama3s) {
  const std::string titan = TestDir("titan"), meta = TestDir("meta"), back = TestDir("back");
  SaveTitan(titan, 1, SmallModel(), /*describe=*/true);
  ConvertOptions to_meta;
  to_meta.to = CheckpointFormat::kMeta;
  // params.json's use_scaled_rope means Meta's fixed original length, 8192.
  EXPECT_THAT(ConvertCheckpoint(titan, meta, to_meta).status().message(),
              HasSubstr("--to=meta: " + titan +
                        "/step-1: Meta's params.json cannot express "
                        "llama3 RoPE scaling factor 8, low_freq_factor 1, high_freq_factor 4, "
                        "original_max_position_embeddings 32: "));
  EXPECT_FALSE(PathExists(meta));

  const NamedTensors weights = SaveTitan(titan, 2, SmallMetaModel(), /*describe=*/true);
  ASSERT_TRUE(ConvertCheckpoint(titan, meta, to_meta).ok());
  ConvertOptions to_titan;
  to_titan.to = CheckpointFormat::kTitan;
  absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(meta, back, to_titan);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->model, "llama3");
  ExpectBitwiseEqual(CheckpointManager(back, 0).Load(0)->model, weights);
  to_titan.model = "qwen3";
  EXPECT_EQ(ConvertCheckpoint(meta, TestDir("x"), to_titan).status().message(),
            meta + ": a Meta checkpoint, and qwen3 has no Meta format");
}

// A folder holding both an HF and a Meta checkpoint is read as HF, with a warning naming both and
// how to read the Meta one: --from=meta in a conversion, its own folder for checkpoint_inspect,
// which has no such flag; the Meta one is read when named (titan_train's: the test below).
TEST(ConvertTest, AFolderWithHfAndMetaFilesIsReadAsHfWithAWarning) {
  const std::string titan = TestDir("titan"), both = TestDir("both"), meta = TestDir("meta");
  SaveTitan(titan, 2, SmallMetaModel(), /*describe=*/true);
  ASSERT_TRUE(ConvertCheckpoint(titan, both, {}).ok());
  ConvertOptions to_meta;
  to_meta.to = CheckpointFormat::kMeta;
  ASSERT_TRUE(ConvertCheckpoint(titan, meta, to_meta).ok());
  for (const char* name : {"params.json", "consolidated.00.pth"}) {
    absl::StatusOr<std::string> bytes = ReadFile(absl::StrCat(meta, "/", name));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ASSERT_TRUE(WriteFileAtomically(absl::StrCat(both, "/", name), *bytes).ok());
  }
  {
    WarningCollector collector;
    absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(both);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->format(), CheckpointFormat::kHf);
    // Once in a process: a run detects its folder's format more than once.
    ASSERT_TRUE(CheckpointReader::Open(both).ok());
    EXPECT_THAT(
        collector.warnings(),
        ElementsAre(both + ": holds both a Hugging Face checkpoint (config.json) and a Meta one "
                           "(params.json, consolidated.00.pth); reading the Hugging Face one "
                           "(to read the Meta one, move params.json and consolidated.00.pth to a "
                           "folder without config.json)"));
  }
  {
    WarningCollector collector;
    ASSERT_TRUE(ConvertCheckpoint(both, TestDir("from_both"), {}).ok());
    EXPECT_THAT(
        collector.warnings(),
        ElementsAre(both + ": holds both a Hugging Face checkpoint (config.json) and a Meta one "
                           "(params.json, consolidated.00.pth); reading the Hugging Face one "
                           "(--from=meta reads the Meta one)"));
  }
  WarningCollector collector;
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader =
      CheckpointReader::Open(both, CheckpointFormat::kMeta);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->format(), CheckpointFormat::kMeta);
  EXPECT_THAT(collector.warnings(), ::testing::IsEmpty());
}

// The trainer's initial load from a folder holding both (Llama's original/ copied beside its HF
// files) reads the one initial_load_in_hf names: HF with it, Meta without it, each with a warning
// saying which it read and how to read the other.
TEST(ConvertTest, AnInitialLoadFromAFolderWithHfAndMetaReadsTheOneInitialLoadInHfNames) {
  const ModelInfo info = SmallMetaModel();
  const std::string titan = TestDir("titan"), both = TestDir("both"), meta = TestDir("meta");
  const NamedTensors hf_weights = SaveTitan(titan, 2, info, /*describe=*/true);
  ASSERT_TRUE(ConvertCheckpoint(titan, both, {}).ok());
  // The Meta one holds other weights, so the tensors loaded tell which one was read.
  CheckpointState other;
  other.model = RandomWeights(info, 8);
  other.extra["model"] = ModelInfoToJson(info);
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(3, other, /*model_only=*/true).ok());
  ConvertOptions to_meta;
  to_meta.to = CheckpointFormat::kMeta;
  ASSERT_TRUE(ConvertCheckpoint(titan + "/step-3", meta, to_meta).ok());
  for (const char* name : {"params.json", "consolidated.00.pth"}) {
    absl::StatusOr<std::string> bytes = ReadFile(absl::StrCat(meta, "/", name));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ASSERT_TRUE(WriteFileAtomically(absl::StrCat(both, "/", name), *bytes).ok());
  }
  const std::string holds = both +
                            ": holds both a Hugging Face checkpoint (config.json) and a Meta one "
                            "(params.json, consolidated.00.pth); reading the ";
  for (const bool in_hf : {false, true}) {
    SCOPED_TRACE(in_hf ? "in_hf" : "not in_hf");
    WarningCollector collector;
    absl::StatusOr<CheckpointFormat> format = DetectInitialLoadFormat(both, in_hf);
    ASSERT_TRUE(format.ok()) << format.status();
    EXPECT_EQ(*format, in_hf ? CheckpointFormat::kHf : CheckpointFormat::kMeta);
    absl::StatusOr<ModelInfo> described = DescribeCheckpointAt(both, in_hf, "llama3");
    ASSERT_TRUE(described.ok()) << described.status();
    NamedTensors loaded;
    for (const auto& [name, tensor] : hf_weights) loaded.emplace_back(name, at::zeros_like(tensor));
    std::vector<ParamRef> params;
    for (auto& [name, tensor] : loaded) params.push_back({name, &tensor});
    const absl::Status load = LoadModelWeights(both, in_hf, info, params);
    ASSERT_TRUE(load.ok()) << load;
    ExpectBitwiseEqual(loaded, in_hf ? hf_weights : other.model);
    // Once in a process, however often a run reads the folder.
    EXPECT_THAT(collector.warnings(),
                ElementsAre(holds + (in_hf ? "Hugging Face one ([checkpoint] initial_load_in_hf = "
                                             "false reads the Meta one)"
                                           : "Meta one ([checkpoint] initial_load_in_hf = true "
                                             "reads the Hugging Face one)")));
  }
  // Without a caller's hint, the warning says how any tool reads the other one.
  WarningCollector collector;
  absl::StatusOr<CheckpointFormat> format = DetectCheckpointFormat(both, "", /*hf_of_both=*/false);
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, CheckpointFormat::kMeta);
  EXPECT_THAT(collector.warnings(),
              ElementsAre(holds + "Meta one (to read the Hugging Face one, move config.json and "
                                  "its safetensors to a folder without params.json)"));
}

// Meta's tied checkpoints (Llama 3.2 1B and 3B) hold output.weight as a copy of the embedding:
// titan writes the copy, and reads a copy back as tied and any other head as untied.
TEST(ConvertTest, TiedHeadsTravelToMetaAsACopyOfTheEmbedding) {
  ModelInfo info = SmallMetaModel();
  info.args.tie_word_embeddings = true;
  const std::string titan = TestDir("titan"), meta = TestDir("meta"), back = TestDir("back");
  const NamedTensors weights = SaveTitan(titan, 2, info, /*describe=*/true);
  ConvertOptions to_meta;
  to_meta.to = CheckpointFormat::kMeta;
  ASSERT_TRUE(ConvertCheckpoint(titan, meta, to_meta).ok());
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(meta);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<at::Tensor> head = (*reader)->Get("output.weight");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_TRUE(head->equal(Named(weights, "tok_embeddings.weight")));

  ConvertOptions to_titan;
  to_titan.to = CheckpointFormat::kTitan;
  ASSERT_TRUE(ConvertCheckpoint(meta, back, to_titan).ok());
  absl::StatusOr<CheckpointState> loaded = CheckpointManager(back, 0).Load(0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectBitwiseEqual(loaded->model, weights);
  EXPECT_TRUE(ModelInfoFromJson(loaded->extra.at("model"), "model")->args.tie_word_embeddings);

  // A head of its own is untied.
  NamedTensors untied = weights;
  untied.emplace_back("output.weight", Named(weights, "tok_embeddings.weight") + 1);
  const std::string own_head = TestDir("own_head"), own_back = TestDir("own_back");
  ASSERT_TRUE(MakeDirectories(own_head).ok());
  ASSERT_TRUE(WriteMetaCheckpoint(own_head, untied, (*reader)->description()).ok());
  ASSERT_TRUE(ConvertCheckpoint(own_head, own_back, to_titan).ok());
  loaded = CheckpointManager(own_back, 0).Load(0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_FALSE(ModelInfoFromJson(loaded->extra.at("model"), "model")->args.tie_word_embeddings);
  EXPECT_TRUE(Named(loaded->model, "output.weight").equal(Named(untied, "output.weight")));
}

// An integer tensor is no model weight: refused before anything is written or loaded.
TEST(ConvertTest, RefusesIntegerWeights) {
  const ModelInfo info = SmallModel();
  const std::string titan = TestDir("titan"), out = TestDir("out");
  CheckpointState state;
  state.model = RandomWeights(info, 2);
  for (auto& [name, tensor] : state.model) {
    if (name == "norm.weight") tensor = at::ones(tensor.sizes(), at::kLong);
  }
  state.extra["model"] = ModelInfoToJson(info);
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, state, /*model_only=*/true).ok());
  ConvertOptions options;
  options.dtype = "bf16";
  EXPECT_EQ(ConvertCheckpoint(titan, out, options).status().message(),
            titan +
                "/step-1: model.safetensors: tensor 'norm.weight' is I64, expected a "
                "floating-point weight");
  EXPECT_FALSE(PathExists(out));
  NamedTensors loaded = RandomWeights(info, 4);
  std::vector<ParamRef> params;
  for (auto& [name, tensor] : loaded) params.push_back({name, &tensor});
  EXPECT_THAT(LoadModelWeights(titan, /*in_hf=*/false, info, params).message(),
              HasSubstr("tensor 'norm.weight' is I64, expected a floating-point weight"));
}

// Checkpoints written before families existed record Llama3Args' keys and no model name.
TEST(ConvertTest, OldTitanModelEntriesStillConvertAndLoad) {
  const ModelInfo info = SmallModel();
  const std::string titan = TestDir("titan"), hf = TestDir("hf");
  CheckpointState state;
  state.model = RandomWeights(info, 3);
  state.extra["model"] = {{"flavor", ""},
                          {"args",
                           {{"dim", 32},
                            {"n_layers", 2},
                            {"n_heads", 4},
                            {"n_kv_heads", 2},
                            {"vocab_size", 40},
                            {"multiple_of", 16},
                            {"ffn_dim_multiplier", 0.0},
                            {"norm_eps", 1e-5},
                            {"rope_theta", 500000.0},
                            {"max_seq_len", 128},
                            {"tie_word_embeddings", false},
                            {"rope_scaling",
                             {{"factor", 8.0},
                              {"low_freq_factor", 1.0},
                              {"high_freq_factor", 4.0},
                              {"original_max_position_embeddings", 32}}}}},
                          {"bos_token_id", 1},
                          {"eos_token_id", 2}};
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(6, state, /*model_only=*/true).ok());
  absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, hf, ConvertOptions());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->model, "llama3");
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->description(), HfConfig(info, "float32"));

  NamedTensors loaded = RandomWeights(info, 4);
  std::vector<ParamRef> params;
  for (auto& [name, tensor] : loaded) params.push_back({name, &tensor});
  const absl::Status load = LoadModelWeights(titan, /*in_hf=*/false, info, params);
  ASSERT_TRUE(load.ok()) << load;
  ExpectBitwiseEqual(loaded, state.model);
}

TEST(ConvertTest, TrainerCheckpointShapesNameTheFlavorAndDtypeConverts) {
  const ModelSpec& spec = **FindModel("llama3");
  TransformerArgs args = spec.Flavor("debugmodel").value();
  args.vocab_size = 300;
  const ModelInfo info = DescribeModel(spec, args);
  const std::string titan = TestDir("titan"), hf = TestDir("hf");
  const NamedTensors weights = SaveTitan(titan, 5, info, /*describe=*/false);

  ConvertOptions options;
  options.dtype = "bf16";
  absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan + "/step-5", hf, options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->flavor, "debugmodel");
  EXPECT_THAT(summary->files,
              ElementsAre("model.safetensors", "config.json", "generation_config.json"));
  absl::StatusOr<std::unique_ptr<CheckpointReader>> reader = CheckpointReader::Open(hf);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->description().at("torch_dtype"), "bfloat16");
  EXPECT_EQ((*reader)->description().at("vocab_size"), 300);
  EXPECT_TRUE(
      (*reader)->Get("model.norm.weight")->equal(Named(weights, "norm.weight").to(at::kBFloat16)));
  uint64_t bytes = 0;
  for (const TensorInfo& tensor : (*reader)->tensors()) bytes += tensor.bytes;
  EXPECT_EQ(summary->bytes, bytes);

  // A flavor two families have is ambiguous; with the family, the summary says what differs.
  options.flavor = "8B";
  EXPECT_THAT(ConvertCheckpoint(titan, TestDir("other"), options).status().message(),
              HasSubstr("step-5: its manifest does not describe the model and its shapes match "
                        "no flavor of llama3: 8B; qwen3: 8B"));
  options.model = "llama3";
  const std::string message(ConvertCheckpoint(titan, TestDir("other"), options).status().message());
  EXPECT_THAT(message, HasSubstr("step-5: checkpoint tensors do not match llama3 8B (dim 4096, "
                                 "32 layers, 32/8 heads of 128, ffn 14336, vocab 300)"));
  EXPECT_THAT(message, HasSubstr("first differing tensors: tok_embeddings.weight [300, 256] vs "
                                 "[300, 4096], "));
  EXPECT_THAT(message, HasSubstr(" more)"));
  EXPECT_LT(message.size(), titan.size() + 300);  // the path, two one-line models, three tensors

  // The same shapes in Qwen3's debug flavor are found too: the family comes from the shapes.
  const ModelSpec& qwen3 = **FindModel("qwen3");
  TransformerArgs qwen_args = qwen3.Flavor("debugmodel").value();
  qwen_args.vocab_size = 300;
  const std::string qwen = TestDir("qwen");
  SaveTitan(qwen, 2, DescribeModel(qwen3, qwen_args), /*describe=*/false);
  options = ConvertOptions();
  options.flavor = "debugmodel";
  summary = ConvertCheckpoint(qwen, TestDir("qwen_hf"), options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->model, "qwen3");
  EXPECT_EQ(summary->flavor, "debugmodel");
}

// An unknown --flavor is named so, with the flavors of the family (of every family while the input
// does not say it), as an unknown --model lists the families; not "holds X, not flavor bogus".
TEST(ConvertTest, AnUnknownFlavorListsTheKnownOnes) {
  const std::string titan = TestDir("titan"), hf = TestDir("hf"), bare = TestDir("bare");
  SaveTitan(titan, 1, SmallModel(), /*describe=*/true);
  SaveTitan(bare, 1, SmallModel(), /*describe=*/false);
  ConvertOptions options;
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, options).ok());
  const std::string llama3_flavors = "debugmodel, 1B, 3B, 8B, 70B, 405B";
  options.flavor = "bogus";
  for (const std::string& input : {titan + "/step-1", hf}) {
    EXPECT_EQ(ConvertCheckpoint(input, TestDir("out"), options).status().message(),
              "--flavor: unknown llama3 flavor \"bogus\" (" + input +
                  " holds a llama3 model); expected one of " + llama3_flavors);
  }
  EXPECT_EQ(ConvertCheckpoint(bare, TestDir("out"), options).status().message(),
            "--flavor: unknown flavor \"bogus\"; expected one of llama3: " + llama3_flavors +
                "; qwen3: debugmodel, 0.6B, 1.7B, 4B, 8B, 14B, 32B");
  // A flavor of another family than the one named or held.
  options.flavor = "0.6B";
  options.model = "llama3";
  EXPECT_EQ(ConvertCheckpoint(bare, TestDir("out"), options).status().message(),
            "--flavor: unknown llama3 flavor \"0.6B\"; expected one of " + llama3_flavors);
  options.model = "";
  EXPECT_EQ(ConvertCheckpoint(hf, TestDir("out"), options).status().message(),
            "--flavor: unknown llama3 flavor \"0.6B\" (" + hf +
                " holds a llama3 model); expected one of " + llama3_flavors);
  EXPECT_FALSE(PathExists(TestDir("out")));
}

TEST(ConvertTest, ExplainsWhatIsWrong) {
  const ModelInfo info = SmallModel();
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 1, info, /*describe=*/false);
  ConvertOptions options;
  EXPECT_THAT(ConvertCheckpoint(titan, out, options).status().message(),
              HasSubstr("shapes match no flavor of llama3: debugmodel, 1B, 3B, 8B, 70B, 405B; "
                        "qwen3: debugmodel, 0.6B"));

  // A described model whose tensors disagree: the first few differences in one line.
  CheckpointState state;
  state.model = RandomWeights(info, 1);
  for (auto it = state.model.begin(); it != state.model.end(); ++it) {
    if (it->first == "layers.0.attention.wq.weight") {
      state.model.erase(it);
      break;
    }
  }
  ASSERT_EQ(state.model[2].first, "output.weight");
  state.model[2].second = at::zeros({3});
  state.model.emplace_back("extra.weight", at::zeros({1}));
  state.extra["model"] = ModelInfoToJson(info);
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(2, state, true).ok());
  const std::string message(ConvertCheckpoint(titan, out, options).status().message());
  EXPECT_EQ(message, titan +
                         "/step-2: checkpoint tensors do not match llama3 (dim 32, 2 layers, "
                         "4/2 heads of 8, ffn 96, vocab 40); first differing tensors: "
                         "output.weight [3] vs [40, 32], layers.0.attention.wq.weight absent "
                         "vs [32, 32], extra.weight [1] vs absent");

  ASSERT_TRUE(MakeDirectories(out).ok());
  ASSERT_TRUE(WriteFileAtomically(out + "/x", "x").ok());
  SaveTitan(titan, 3, info, /*describe=*/true);
  EXPECT_THAT(ConvertCheckpoint(titan, out, options).status().message(),
              HasSubstr("exists and is not empty"));
  options.dtype = "fp16";
  EXPECT_THAT(ConvertCheckpoint(titan, out, options).status().message(),
              HasSubstr("expected keep, bf16 or fp32"));
  // A path that is not there is not there, whatever --from says; a file is not a directory.
  EXPECT_EQ(ConvertCheckpoint(TestDir("none"), out, ConvertOptions()).status().message(),
            TestDir("none") + ": no such file or directory");
  ConvertOptions from_titan;
  from_titan.from = CheckpointFormat::kTitan;
  EXPECT_EQ(ConvertCheckpoint(TestDir("none"), out, from_titan).status().message(),
            TestDir("none") + ": no such file or directory");
  EXPECT_EQ(ConvertCheckpoint(out + "/x", TestDir("out2"), ConvertOptions()).status().message(),
            out + "/x: not a directory");
  // A file named as a step beside real steps is named, as titan_train names it, not taken for a
  // folder of an unknown format.
  ASSERT_TRUE(WriteFileAtomically(titan + "/step-9", "").ok());
  const std::string stray = titan + "/step-9 is named as a checkpoint step but is not a folder";
  EXPECT_THAT(
      std::string(ConvertCheckpoint(titan, TestDir("out3"), ConvertOptions()).status().message()),
      ::testing::StartsWith(stray));
  EXPECT_THAT(std::string(DetectCheckpointFormat(titan).status().message()),
              ::testing::StartsWith(stray));
}

// A FIFO named as weights is refused before it is opened: opening one waits for a writer, forever.
TEST(ConvertTest, RefusesWeightsThatAreNotARegularFile) {
  alarm(60);  // Without the check this test would hang; the alarm fails it instead.
  const ModelInfo info = SmallModel();
  const std::string titan = TestDir("fifo_titan"), hf = TestDir("fifo_hf");
  SaveTitan(titan, 1, info, /*describe=*/true);
  ConvertOptions to_hf;
  to_hf.to = CheckpointFormat::kHf;
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, to_hf).ok());
  for (const std::string& weights :
       {hf + "/model.safetensors", titan + "/step-1/model.safetensors"}) {
    ASSERT_TRUE(RemoveTree(weights).ok());
    ASSERT_EQ(::mkfifo(weights.c_str(), 0600), 0);
  }
  ASSERT_TRUE(RenamePath(hf + "/model.safetensors", hf + "/pytorch_model.bin").ok());
  for (const auto& [folder, weights] : {std::pair(hf, hf + "/pytorch_model.bin"),
                                        std::pair(titan, titan + "/step-1/model.safetensors")}) {
    EXPECT_THAT(ConvertCheckpoint(folder, TestDir("fifo_out"), ConvertOptions()).status().message(),
                HasSubstr(weights + ": not a regular file"));
  }
  ASSERT_TRUE(RenamePath(hf + "/pytorch_model.bin", hf + "/model.safetensors").ok());
  EXPECT_THAT(CheckpointReader::Open(hf).status().message(),
              HasSubstr(hf + "/model.safetensors: not a regular file"));
  alarm(0);
}

// An option of another output is refused, not ignored; so is a negative step.
TEST(ConvertTest, RefusesOptionsThatDoNotApplyToTheOutput) {
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 3, SmallModel(), /*describe=*/true);
  const auto message = [&](CheckpointFormat to, std::optional<uint64_t> max_shard_bytes,
                           std::optional<int64_t> step) {
    ConvertOptions options;
    options.to = to;
    options.max_shard_bytes = max_shard_bytes;
    options.step = step;
    return std::string(ConvertCheckpoint(titan, out, options).status().message());
  };
  EXPECT_EQ(message(CheckpointFormat::kTitan, 1000, std::nullopt),
            "--max_shard_size applies to --to=hf only");
  EXPECT_EQ(message(CheckpointFormat::kMeta, 1000, std::nullopt),
            "--max_shard_size applies to --to=hf only");
  EXPECT_EQ(message(CheckpointFormat::kHf, std::nullopt, 5), "--step applies to --to=titan only");
  EXPECT_EQ(message(CheckpointFormat::kMeta, std::nullopt, 5), "--step applies to --to=titan only");
  EXPECT_EQ(message(CheckpointFormat::kTitan, std::nullopt, -5),
            "--step: -5, expected a step >= 0");
  EXPECT_FALSE(PathExists(out));
  EXPECT_EQ(message(CheckpointFormat::kTitan, std::nullopt, 0), "");
  EXPECT_TRUE(PathExists(out + "/step-0"));
}

// A titan checkpoint is read against its manifest's CRC-32s, as the trainer's loader reads it.
TEST(ConvertTest, RefusesTitanTensorsThatFailTheirChecksum) {
  const ModelInfo info = SmallMetaModel();
  const std::string titan = TestDir("titan");
  SaveTitan(titan, 3, info, /*describe=*/true);
  CorruptLastByte(titan + "/step-3/model.safetensors");
  for (CheckpointFormat to :
       {CheckpointFormat::kHf, CheckpointFormat::kTitan, CheckpointFormat::kMeta}) {
    ConvertOptions options;
    options.to = to;
    const absl::Status status = ConvertCheckpoint(titan, TestDir("out"), options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(), HasSubstr(titan + "/step-3/model.safetensors: tensor '"));
    EXPECT_THAT(status.message(), HasSubstr("does not match the manifest's"));
    EXPECT_THAT(*ListDirectory(Dirname(titan)), ElementsAre("titan"));  // No output, no temporary.
  }
  NamedTensors loaded = RandomWeights(info, 4);
  std::vector<ParamRef> params;
  for (auto& [name, tensor] : loaded) params.push_back({name, &tensor});
  EXPECT_THAT(LoadModelWeights(titan, /*in_hf=*/false, info, params).message(),
              HasSubstr("CRC-32"));
}

// Exporting the model reads the model's files only: a damaged optimizer file does not stop it, a
// damaged model file does (named).
TEST(ConvertTest, ReadsOnlyTheModelFilesOfATitanStep) {
  const ModelInfo info = SmallModel();
  const std::string titan = TestDir("titan");
  CheckpointState state;
  state.model = RandomWeights(info, 1);
  for (const auto& [name, tensor] : state.model) {
    state.optimizer.emplace_back(name + ".exp_avg", at::zeros_like(tensor));
  }
  state.extra["model"] = ModelInfoToJson(info);
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(5, state, /*model_only=*/false).ok());
  ASSERT_TRUE(WriteFileAtomically(titan + "/step-5/optimizer.safetensors", "truncated").ok());
  ConvertOptions options;
  options.to = CheckpointFormat::kHf;
  absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, TestDir("hf"), options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_TRUE(RemoveTree(titan + "/step-5/optimizer.safetensors").ok());
  ASSERT_TRUE(ConvertCheckpoint(titan, TestDir("hf2"), options).ok());
  ASSERT_TRUE(WriteFileAtomically(titan + "/step-5/model.safetensors", "truncated").ok());
  const std::string refused = TestDir("hf3");
  EXPECT_THAT(ConvertCheckpoint(titan, refused, options).status().message(),
              HasSubstr(titan + "/step-5/model.safetensors"));
  EXPECT_FALSE(PathExists(refused));
}

// A tokenizer with ids the model does not embed is refused, as titan_train refuses the pair:
// transformers fails on such an export at the first of those ids.
TEST(ConvertTest, RefusesATokenizerWithIdsPastTheEmbedding) {
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 3, SmallModel(), /*describe=*/true);
  ConvertOptions options;
  options.tokenizer_dir = "assets/default_tokenizer";
  EXPECT_EQ(ConvertCheckpoint(titan, out, options).status().message(),
            "--tokenizer_dir: assets/default_tokenizer: the tokenizer has 2048 ids but llama3 "
            "(custom shape) embeds only 40");
  EXPECT_FALSE(PathExists(out));
  // A model that embeds them all takes the tokenizer.
  ModelInfo embeds_all = SmallModel();
  embeds_all.args.vocab_size = 2048;
  const std::string titan_2048 = TestDir("titan_2048");
  SaveTitan(titan_2048, 3, embeds_all, /*describe=*/true);
  ASSERT_TRUE(ConvertCheckpoint(titan_2048, out, options).ok());
  EXPECT_TRUE(PathExists(out + "/tokenizer.json"));

  // A Meta checkpoint names no BOS/EOS ids: the export takes the tokenizer's, else generate()
  // never stops.
  ModelInfo meta_model = SmallMetaModel();
  meta_model.args.vocab_size = 2048;
  const std::string meta = TestDir("meta_2048"), from_meta = TestDir("from_meta");
  SaveTitan(titan_2048, 4, meta_model, /*describe=*/true);
  ConvertOptions to_meta;
  to_meta.to = CheckpointFormat::kMeta;
  ASSERT_TRUE(ConvertCheckpoint(titan_2048, meta, to_meta).ok());
  absl::StatusOr<ConvertSummary> converted = ConvertCheckpoint(meta, from_meta, options);
  ASSERT_TRUE(converted.ok()) << converted.status();
  for (const char* file : {"/config.json", "/generation_config.json"}) {
    absl::StatusOr<json> written = ReadJsonFile(from_meta + file);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(written->at("bos_token_id"), 2040) << file;  // <|begin_of_text|>
    EXPECT_EQ(written->at("eos_token_id"), 2041) << file;  // <|end_of_text|>
  }
}

// A conversion stopped (by a signal) or failing after it made the output directory removes it.
TEST(ConvertTest, LeavesNoOutputWhenStoppedOrFailing) {
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 3, SmallMetaModel(), /*describe=*/true);
  const std::atomic<int> stop_signal{2};
  for (CheckpointFormat to :
       {CheckpointFormat::kHf, CheckpointFormat::kTitan, CheckpointFormat::kMeta}) {
    ConvertOptions options;
    options.to = to;
    options.stop_signal = &stop_signal;
    const absl::Status status = ConvertCheckpoint(titan, out, options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
    EXPECT_EQ(status.message(), "stopped by signal 2");
    EXPECT_THAT(*ListDirectory(Dirname(titan)), ElementsAre("titan"));
  }
  ConvertOptions options;
  options.tokenizer_dir = TestDir("no_tokenizer");
  ASSERT_TRUE(MakeDirectories(options.tokenizer_dir).ok());
  EXPECT_THAT(ConvertCheckpoint(titan, out, options).status().message(),
              HasSubstr("--tokenizer_dir: " + options.tokenizer_dir + ": none of tokenizer.json"));
  EXPECT_THAT(*ListDirectory(Dirname(titan)),
              ::testing::UnorderedElementsAre("no_tokenizer", "titan"));
  // A folder that is not there is named so, not searched for tokenizer files.
  ConvertOptions missing_tokenizer;
  missing_tokenizer.tokenizer_dir = options.tokenizer_dir + "/absent";
  EXPECT_EQ(ConvertCheckpoint(titan, out, missing_tokenizer).status().message(),
            "--tokenizer_dir: " + missing_tokenizer.tokenizer_dir + ": no such directory");
  missing_tokenizer.tokenizer_dir = titan + "/step-3/manifest.json";
  EXPECT_EQ(ConvertCheckpoint(titan, out, missing_tokenizer).status().message(),
            "--tokenizer_dir: " + missing_tokenizer.tokenizer_dir + ": not a directory");
  EXPECT_THAT(*ListDirectory(Dirname(titan)),
              ::testing::UnorderedElementsAre("no_tokenizer", "titan"));
  // An empty output directory given is left as it was.
  ASSERT_TRUE(MakeDirectories(out).ok());
  EXPECT_FALSE(ConvertCheckpoint(titan, out, options).ok());
  EXPECT_TRUE(ListDirectory(out)->empty());
}

// The summary is handed over once the output is in place (an hf rename that fails then reports
// no success first), and a failure to pass it on removes that output: all or nothing.
TEST(ConvertTest, AfterCommitSeesTheOutputInPlaceAndItsFailureRemovesIt) {
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 3, SmallMetaModel(), /*describe=*/true);
  for (CheckpointFormat to :
       {CheckpointFormat::kHf, CheckpointFormat::kTitan, CheckpointFormat::kMeta}) {
    for (bool existed : {false, true}) {
      SCOPED_TRACE(absl::StrCat(CheckpointFormatName(to), existed ? ", OUT given empty" : ""));
      if (existed) {
        ASSERT_TRUE(MakeDirectories(out).ok());
      }
      const std::string written = to == CheckpointFormat::kTitan ? out + "/step-3/manifest.json"
                                  : to == CheckpointFormat::kHf  ? out + "/config.json"
                                                                 : out + "/params.json";
      int calls = 0;
      ConvertOptions options;
      options.to = to;
      options.after_commit = [&](const ConvertSummary& summary) {
        ++calls;
        EXPECT_TRUE(IsDirectory(summary.output)) << summary.output;
        EXPECT_TRUE(PathExists(written));
        EXPECT_THAT(*ListDirectory(Dirname(out)), ::testing::UnorderedElementsAre("out", "titan"));
        return absl::DataLossError("stdout: write failed");
      };
      EXPECT_EQ(ConvertCheckpoint(titan, out, options).status().message(), "stdout: write failed");
      EXPECT_EQ(calls, 1);
      if (!existed) {
        EXPECT_THAT(*ListDirectory(Dirname(out)), ::testing::UnorderedElementsAre("titan"));
      } else {
        EXPECT_THAT(*ListDirectory(Dirname(out)), ::testing::UnorderedElementsAre("out", "titan"));
        EXPECT_THAT(*ListDirectory(out), ::testing::IsEmpty());
        ASSERT_TRUE(RemoveTree(out).ok());
      }
    }
  }
}

// Two conversions into one output: the second is refused while the first writes, and removes
// nothing of it (it had seen no output, so its failure cleanup would have taken the first's).
TEST(ConvertTest, OutputBeingWrittenByAnotherConversionIsRefusedAndKept) {
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 3, SmallModel(), /*describe=*/true);
  absl::StatusOr<std::unique_ptr<FolderLock>> other = FolderLock::AcquireOnFolder(out);
  ASSERT_TRUE(other.ok()) << other.status();
  for (CheckpointFormat to : {CheckpointFormat::kHf, CheckpointFormat::kTitan}) {
    ConvertOptions options;
    options.to = to;
    const absl::Status status = ConvertCheckpoint(titan, out, options).status();
    EXPECT_EQ(status.message(),
              out + " is being written by another run; wait for it to end or use another folder");
    EXPECT_TRUE(IsDirectory(out));
  }
}

// The other conversion has committed its step but still runs: its output is in use, not "not
// empty", whatever step the second one would write.
TEST(ConvertTest, OutputInUseIsRefusedAsSuchOnceTheOtherHasCommitted) {
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 3, SmallModel(), /*describe=*/true);
  ASSERT_TRUE(MakeDirectories(out + "/step-3").ok());
  absl::StatusOr<std::unique_ptr<FolderLock>> other = FolderLock::AcquireOnFolder(out);
  ASSERT_TRUE(other.ok()) << other.status();
  for (const std::optional<int64_t> step : {std::optional<int64_t>(), std::optional<int64_t>(5)}) {
    ConvertOptions options;
    options.to = CheckpointFormat::kTitan;
    options.step = step;
    EXPECT_EQ(ConvertCheckpoint(titan, out, options).status().message(),
              out + " is being written by another run; wait for it to end or use another folder");
  }
  other->reset();
  EXPECT_EQ(ConvertCheckpoint(titan, out, {}).status().message(),
            out + ": exists and is not empty");
  EXPECT_THAT(*ListDirectory(out), ElementsAre("step-3"));
}

// A new folder inside a running trainer's checkpoint folder would be taken for one of its steps.
TEST(ConvertTest, OutputInsideAFolderARunHoldsIsRefused) {
  const std::string titan = TestDir("titan"), run = TestDir("run_checkpoint");
  SaveTitan(titan, 3, SmallModel(), /*describe=*/true);
  absl::StatusOr<std::unique_ptr<FolderLock>> trainer = FolderLock::Acquire(run);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const absl::Status status = ConvertCheckpoint(titan, run + "/step-999", {}).status();
  EXPECT_THAT(status.message(), HasSubstr(run + " is in use by another run (pid "));
  EXPECT_FALSE(PathExists(run + "/step-999"));
  trainer->reset();
  EXPECT_TRUE(ConvertCheckpoint(titan, run + "/step-999", {}).ok());
}

// What a conversion killed mid-write left in its output (a step temporary) does not make the
// output "not empty" for the rerun, which removes it; anything else still does.
TEST(ConvertTest, RerunAfterAnInterruptedConversionReplacesItsLeftovers) {
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 3, SmallMetaModel(), /*describe=*/true);
  for (CheckpointFormat to :
       {CheckpointFormat::kTitan, CheckpointFormat::kHf, CheckpointFormat::kMeta}) {
    ASSERT_TRUE(RemoveTree(out).ok());
    ASSERT_TRUE(MakeDirectories(out + "/step-3.tmp-4242").ok());
    ASSERT_TRUE(WriteFileAtomically(out + "/step-3.tmp-4242/model.safetensors.tmp.4242", "x").ok());
    ASSERT_TRUE(WriteFileAtomically(out + "/consolidated.00.pth.tmp.4243", "x").ok());
    ConvertOptions options;
    options.to = to;
    const absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, out, options);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_FALSE(PathExists(out + "/step-3.tmp-4242"));
    EXPECT_FALSE(PathExists(out + "/consolidated.00.pth.tmp.4243"));
    EXPECT_TRUE(PathExists(to == CheckpointFormat::kTitan ? out + "/step-3/manifest.json"
                           : to == CheckpointFormat::kHf  ? out + "/config.json"
                                                          : out + "/params.json"));
  }
  ASSERT_TRUE(RemoveTree(out).ok());
  ASSERT_TRUE(MakeDirectories(out + "/step-3.tmp-4242").ok());
  ASSERT_TRUE(WriteFileAtomically(out + "/notes.tmp.txt", "mine").ok());
  EXPECT_EQ(ConvertCheckpoint(titan, out, {}).status().message(),
            out + ": exists and is not empty");
  EXPECT_TRUE(PathExists(out + "/step-3.tmp-4242"));
}

TEST(ConvertTest, HfOutputThroughALinkLandsInTheEmptyDirectoryItNames) {
  const std::string titan = TestDir("titan"), real = TestDir("real"), link = TestDir("link");
  SaveTitan(titan, 3, SmallModel(), /*describe=*/true);
  ASSERT_TRUE(MakeDirectories(real).ok());
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  for (const std::string& output : {link, link + "/"}) {
    const absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, output, {});
    ASSERT_TRUE(summary.ok()) << output << ": " << summary.status();
    EXPECT_TRUE(PathExists(real + "/model.safetensors")) << output;
    EXPECT_TRUE(PathExists(link + "/config.json")) << output;  // the link still names it
    // Written beside the directory and renamed onto it: no temporary left on either side.
    EXPECT_THAT(*ListDirectory(Dirname(real)),
                ::testing::UnorderedElementsAre("titan", "real", "link"));
    ASSERT_TRUE(RemoveTree(real).ok());
    ASSERT_TRUE(MakeDirectories(real).ok());
  }
  // A link to a directory that is not empty is refused, as the directory itself is.
  ASSERT_TRUE(WriteFileAtomically(real + "/mine.txt", "kept").ok());
  EXPECT_THAT(ConvertCheckpoint(titan, link, {}).status().message(),
              HasSubstr(link + ": exists and is not empty"));
  EXPECT_THAT(*ListDirectory(real), ElementsAre("mine.txt"));
}

// Gives `folder` a group other than this process's where it may (root: one past its own, unless
// a user namespace maps no such group; else another of its groups), which it returns.
std::optional<gid_t> GiveOtherGroup(const std::string& folder) {
  std::vector<gid_t> groups(std::max(0, ::getgroups(0, nullptr)));
  groups.resize(std::max(0, ::getgroups(static_cast<int>(groups.size()), groups.data())));
  if (::geteuid() == 0) groups.push_back(::getegid() + 1);
  for (const gid_t group : groups) {
    if (group != ::getegid() && ::chown(folder.c_str(), static_cast<uid_t>(-1), group) == 0) {
      return group;
    }
  }
  return std::nullopt;
}

// An HF export renamed onto an existing folder, named or behind a link, keeps that folder's mode
// (setgid and sticky too) and group; one read-only to its owner is written all the same.
TEST(ConvertTest, HfOutputKeepsTheModeAndGroupOfTheFolderItReplaces) {
  const std::string titan = TestDir("titan"), out = TestDir("out"), link = TestDir("link");
  SaveTitan(titan, 3, SmallModel(), /*describe=*/true);
  ASSERT_EQ(::symlink(out.c_str(), link.c_str()), 0);
  for (const mode_t mode : {0700, 02750, 01777, 0500}) {
    for (const std::string& output : {out, link}) {
      ASSERT_TRUE(MakeDirectories(out).ok());
      const std::optional<gid_t> group = GiveOtherGroup(out);
      ASSERT_EQ(::chmod(out.c_str(), mode), 0);
      const absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, output, {});
      ASSERT_TRUE(summary.ok()) << output << ": " << summary.status();
      EXPECT_TRUE(PathExists(out + "/config.json")) << output;
      struct stat info;
      ASSERT_EQ(::stat(out.c_str(), &info), 0);
      EXPECT_EQ(info.st_mode & 07777, mode) << std::oct << mode << " " << output;
      if (group) EXPECT_EQ(info.st_gid, *group) << output;
      ASSERT_EQ(::chmod(out.c_str(), 0700), 0);
      ASSERT_TRUE(RemoveTree(out).ok());
    }
  }
}

// The path realpath gives for an existing `path` (TEST_TMPDIR may lie behind a link).
std::string RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  EXPECT_NE(::realpath(path.c_str(), resolved), nullptr) << path;
  return resolved;
}

// "out/." and "out/sub/.." name out: a conversion writes there (an HF export is renamed onto out
// itself, as "out/." cannot be), and one refused or failing leaves no folder the path made.
TEST(ConvertTest, OutputWithDotComponentsIsTheFolderItNames) {
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 3, SmallMetaModel(), /*describe=*/true);
  const std::string parent = RealPath(Dirname(titan));
  for (CheckpointFormat to :
       {CheckpointFormat::kHf, CheckpointFormat::kTitan, CheckpointFormat::kMeta}) {
    for (const std::string& output : {out + "/.", out + "/sub/.."}) {
      ASSERT_TRUE(RemoveTree(out).ok());
      if (output == out + "/.") ASSERT_TRUE(MakeDirectories(out).ok());  // given empty
      ConvertOptions options;
      options.to = to;
      const absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, output, options);
      ASSERT_TRUE(summary.ok()) << output << ": " << summary.status();
      EXPECT_TRUE(PathExists(to == CheckpointFormat::kTitan ? out + "/step-3/manifest.json"
                             : to == CheckpointFormat::kHf  ? out + "/config.json"
                                                            : out + "/params.json"))
          << output;
      EXPECT_THAT(summary->output, HasSubstr(parent + "/out")) << output;
      EXPECT_FALSE(PathExists(out + "/sub")) << output;
      EXPECT_THAT(*ListDirectory(parent), ::testing::UnorderedElementsAre("titan", "out"));
    }
  }
  // Refused: out is not empty, and out/sub is not made to find that out.
  EXPECT_EQ(ConvertCheckpoint(titan, out + "/sub/..", {}).status().message(),
            parent + "/out: exists and is not empty");
  EXPECT_FALSE(PathExists(out + "/sub"));
  // Stopped: the new folder "fresh/." named is removed.
  const std::atomic<int> stop_signal{2};
  ConvertOptions stopped;
  stopped.stop_signal = &stop_signal;
  EXPECT_EQ(ConvertCheckpoint(titan, parent + "/fresh/.", stopped).status().code(),
            absl::StatusCode::kCancelled);
  EXPECT_THAT(*ListDirectory(parent), ::testing::UnorderedElementsAre("titan", "out"));
}

// Renamed onto, the working directory would leave the shell in a removed folder that shows none of
// the export: it is written in place, and emptied again when the export fails.
TEST(ConvertTest, HfOutputIntoTheWorkingDirectoryIsWrittenThere) {
  const std::string titan = TestDir("titan"), out = TestDir("out");
  SaveTitan(titan, 3, SmallModel(), /*describe=*/true);
  ASSERT_TRUE(MakeDirectories(out).ok());
  // A tokenizer.json that cannot be read fails the export after its weights are written.
  ConvertOptions unreadable_tokenizer;
  unreadable_tokenizer.tokenizer_dir = TestDir("tokenizer");
  ASSERT_TRUE(MakeDirectories(unreadable_tokenizer.tokenizer_dir + "/tokenizer.json").ok());
  char previous[PATH_MAX];
  ASSERT_NE(::getcwd(previous, sizeof(previous)), nullptr);
  ASSERT_EQ(::chdir(out.c_str()), 0);
  const absl::Status failed = ConvertCheckpoint(titan, ".", unreadable_tokenizer).status();
  const std::vector<std::string> after_failure =
      ListDirectory(".").value_or(std::vector<std::string>{"unreadable"});
  const absl::StatusOr<ConvertSummary> summary = ConvertCheckpoint(titan, ".", {});
  const bool in_place = PathExists("config.json") && PathExists("model.safetensors");
  ASSERT_EQ(::chdir(previous), 0);
  EXPECT_THAT(failed.message(), HasSubstr("tokenizer.json"));
  EXPECT_TRUE(after_failure.empty());
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_TRUE(in_place);
  EXPECT_EQ(summary->output, RealPath(out));
  EXPECT_THAT(*ListDirectory(Dirname(out)),
              ::testing::UnorderedElementsAre("titan", "out", "tokenizer"));
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

TEST(SaveHfExportTest, WritesWhatConvertWritesAndLoadsBackBitwise) {
  const ModelInfo info = SmallModel();
  const std::string titan = TestDir("titan"), converted = TestDir("converted");
  const std::string run = TestDir("run"), exported = run + "/hf-final";  // run/ does not exist.
  const NamedTensors weights = SaveTitan(titan, 9, info, /*describe=*/true);

  ConvertOptions to_hf;
  to_hf.max_shard_bytes = 8000;
  ASSERT_TRUE(ConvertCheckpoint(titan, converted, to_hf).ok());
  HfExportOptions options;
  options.max_shard_bytes = 8000;
  const absl::Status saved = SaveHfExport(weights, info, at::kFloat, exported, options);
  ASSERT_TRUE(saved.ok()) << saved;
  EXPECT_TRUE(PathExists(exported + "/model.safetensors.index.json"));  // Sharded, as asked.
  ExpectSameExport(exported, converted);
  EXPECT_THAT(*ListDirectory(run), ElementsAre("hf-final"));  // No temporary left beside it.

  // initial_load_in_hf reads it back into a model's parameters: the very tensors exported.
  NamedTensors loaded;
  for (const auto& [name, tensor] : weights) loaded.emplace_back(name, at::zeros_like(tensor));
  std::vector<ParamRef> params;
  for (auto& [name, tensor] : loaded) params.push_back({name, &tensor});
  const absl::Status load = LoadModelWeights(exported, /*in_hf=*/true, info, params);
  ASSERT_TRUE(load.ok()) << load;
  ExpectBitwiseEqual(loaded, weights);
}

// initial_load_in_hf reads a folder of PyTorch pickles (pytorch_model.bin, as transformers 4 saved
// it) as the safetensors it was written from.
TEST(SaveHfExportTest, InitialLoadReadsPickleWeights) {
  ModelInfo info = SmallModel();
  info.args.tie_word_embeddings = true;
  const NamedTensors weights = RandomWeights(info, 3);
  const std::string exported = TestDir("exported"), pickled = TestDir("pickled");
  ASSERT_TRUE(SaveHfExport(weights, info, at::kFloat, exported).ok());
  const std::unique_ptr<CheckpointReader> reader = *CheckpointReader::Open(exported);
  NamedTensors hf;
  for (const TensorInfo& tensor : reader->tensors()) {
    hf.emplace_back(tensor.name, *reader->Get(tensor.name));
  }
  // transformers 4 saved the tied head too (over the embedding's storage; here a copy).
  hf.emplace_back("lm_head.weight", *reader->Get("model.embed_tokens.weight"));
  ASSERT_TRUE(MakeDirectories(pickled).ok());
  ASSERT_TRUE(WriteMetaCheckpoint(pickled, hf, json::object()).ok());
  ASSERT_TRUE(RenamePath(pickled + "/consolidated.00.pth", pickled + "/pytorch_model.bin").ok());
  ASSERT_TRUE(RemoveTree(pickled + "/params.json").ok());
  ASSERT_TRUE(
      WriteFileAtomically(pickled + "/config.json", *ReadFile(exported + "/config.json")).ok());

  const absl::StatusOr<ModelInfo> described = DescribeCheckpointAt(pickled, /*in_hf=*/true);
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_TRUE(described->args.tie_word_embeddings);
  NamedTensors loaded;
  for (const auto& [name, tensor] : weights) loaded.emplace_back(name, at::zeros_like(tensor));
  std::vector<ParamRef> params;
  for (auto& [name, tensor] : loaded) params.push_back({name, &tensor});
  const absl::Status load = LoadModelWeights(pickled, /*in_hf=*/true, info, params);
  ASSERT_TRUE(load.ok()) << load;
  ExpectBitwiseEqual(loaded, weights);
}

// [model] tokenizer_path naming a tokenizer.json file of any name: that file is the export's
// tokenizer.json, its folder's other tokenizer files travel with it.
TEST(SaveHfExportTest, TokenizerJsonReplacesTheFoldersOwn) {
  const ModelInfo info = SmallModel();
  const NamedTensors weights = RandomWeights(info, 5);
  const std::string tok = TestDir("tok"), exported = TestDir("exported");
  ASSERT_TRUE(MakeDirectories(tok).ok());
  ASSERT_TRUE(WriteFileAtomically(tok + "/tokenizer.json", "{\"folder's\": 1}").ok());
  ASSERT_TRUE(WriteFileAtomically(tok + "/bpe.json", "{\"named\": 1}").ok());
  ASSERT_TRUE(WriteFileAtomically(tok + "/tokenizer_config.json", "{\"bos_token\": null}").ok());
  HfExportOptions options;
  options.tokenizer_dir = tok;
  options.tokenizer_json = tok + "/bpe.json";
  const absl::Status saved = SaveHfExport(weights, info, at::kFloat, exported, options);
  ASSERT_TRUE(saved.ok()) << saved;
  EXPECT_EQ(ReadFile(exported + "/tokenizer.json").value_or("(missing)"), "{\"named\": 1}");
  EXPECT_EQ(ReadFile(exported + "/tokenizer_config.json").value_or("(missing)"),
            "{\"bos_token\": null}");
  EXPECT_FALSE(PathExists(exported + "/bpe.json"));
  // One gone since the run read it fails the export rather than leaving it without.
  options.tokenizer_json = tok + "/gone.json";
  EXPECT_THAT(SaveHfExport(weights, info, at::kFloat, TestDir("gone"), options).message(),
              HasSubstr(tok + "/gone.json"));
}

TEST(SaveHfExportTest, CastsAsConvertsDtypeDoes) {
  ModelInfo info = SmallModel();
  info.args.tie_word_embeddings = true;
  const std::string titan = TestDir("titan"), converted = TestDir("converted");
  const std::string exported = TestDir("exported");
  const NamedTensors weights = SaveTitan(titan, 1, info, /*describe=*/true);
  ConvertOptions to_hf;
  to_hf.dtype = "bf16";
  ASSERT_TRUE(ConvertCheckpoint(titan, converted, to_hf).ok());
  const absl::Status saved = SaveHfExport(weights, info, at::kBFloat16, exported);
  ASSERT_TRUE(saved.ok()) << saved;
  ExpectSameExport(exported, converted);
  absl::StatusOr<std::string> config = ReadFile(exported + "/config.json");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(json::parse(*config).at("torch_dtype"), "bfloat16");
  EXPECT_EQ(json::parse(*config).at("tie_word_embeddings"), true);
}

// transformers reads torch_dtype by torch's own name; "Double" fails its load.
TEST(SaveHfExportTest, NamesEveryDtypeAsTransformersDoes) {
  const ModelInfo info = SmallModel();
  const NamedTensors weights = RandomWeights(info, 5);
  const std::pair<at::ScalarType, const char*> kNames[] = {{at::kFloat, "float32"},
                                                           {at::kBFloat16, "bfloat16"},
                                                           {at::kHalf, "float16"},
                                                           {at::kDouble, "float64"}};
  for (const auto& [dtype, name] : kNames) {
    const std::string exported = TestDir(std::string("exported_") + name);
    const absl::Status saved = SaveHfExport(weights, info, dtype, exported);
    ASSERT_TRUE(saved.ok()) << saved;
    absl::StatusOr<std::string> config = ReadFile(exported + "/config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(json::parse(*config).at("torch_dtype"), name);
  }
}

TEST(SaveHfExportTest, LeavesNothingHalfWritten) {
  const ModelInfo info = SmallModel();
  const std::string root = TestDir("run"), exported = root + "/hf";
  NamedTensors weights = RandomWeights(info, 3);

  // A crash mid-export leaves only a temporary, which the next export removes.
  ASSERT_TRUE(MakeDirectories(exported + ".tmp-999999").ok());
  ASSERT_TRUE(WriteFileAtomically(exported + ".tmp-999999/model.safetensors", "partial").ok());
  ASSERT_TRUE(SaveHfExport(weights, info, at::kFloat, exported).ok());
  EXPECT_THAT(*ListDirectory(root), ElementsAre("hf"));

  // An existing export is not overwritten.
  EXPECT_EQ(SaveHfExport(weights, info, at::kFloat, exported).code(),
            absl::StatusCode::kAlreadyExists);

  // A model that is not the one described fails before anything is written.
  weights.erase(std::find_if(weights.begin(), weights.end(),
                             [](const auto& named) { return named.first == "output.weight"; }));
  const std::string other = root + "/other";
  const std::string message(SaveHfExport(weights, info, at::kFloat, other).message());
  EXPECT_THAT(message, HasSubstr("model exported to " + other +
                                 ": checkpoint tensors do not match llama3 (dim 32"));
  EXPECT_THAT(message, HasSubstr("first differing tensors: output.weight absent vs [40, 32]"));
  EXPECT_THAT(*ListDirectory(root), ElementsAre("hf"));

  // A tokenizer folder without tokenizer files fails before anything is written.
  weights = RandomWeights(info, 3);
  HfExportOptions options;
  options.tokenizer_dir = TestDir("no_tokenizer");
  ASSERT_TRUE(MakeDirectories(options.tokenizer_dir).ok());
  EXPECT_EQ(SaveHfExport(weights, info, at::kFloat, other, options).code(),
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
