#include "lib/interop/inspect.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/safetensors.h"
#include "lib/checkpoint/test_dir.h"
#include "lib/interop/convert.h"
#include "lib/interop/meta_checkpoint.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// A custom shape of `family` (one layer, 4/2 heads).
ModelInfo SmallModel(const std::string& family) {
  const ModelSpec& spec = **FindModel(family);
  TransformerArgs args = spec.defaults;
  args.dim = 32;
  args.n_layers = 1;
  args.n_heads = 4;
  args.n_kv_heads = 2;
  args.head_dim = 16;
  args.vocab_size = 24;
  args.ffn_hidden_dim = 96;
  args.max_seq_len = 64;
  return DescribeModel(spec, args);
}

CheckpointState SmallState(int seed, const std::string& family = "llama3") {
  const ModelInfo info = SmallModel(family);
  at::manual_seed(seed);
  CheckpointState state;
  for (const auto& [name, shape] : ParameterShapes(*info.spec, info.args)) {
    state.model.emplace_back(name, at::randn(shape));
  }
  state.extra["model"] = ModelInfoToJson(info);
  return state;
}

TEST(InspectTest, StatsMatchDirectComputationAndCountNonFinite) {
  const at::Tensor values = at::randn({1000}, at::kDouble) * 3 + 5;
  TensorStats stats = ComputeTensorStats(values.to(at::kFloat));
  const at::Tensor rounded = values.to(at::kFloat).to(at::kDouble);
  EXPECT_NEAR(stats.mean, rounded.mean().item<double>(), 1e-9);
  // torch.std's default: Bessel-corrected, which users compare with.
  EXPECT_NEAR(stats.std, rounded.std().item<double>(), 1e-9);
  EXPECT_EQ(stats.min, rounded.min().item<double>());
  EXPECT_EQ(stats.max, rounded.max().item<double>());

  const float inf = std::numeric_limits<float>::infinity();
  stats = ComputeTensorStats(at::tensor({1.0f, NAN, inf, -inf, 3.0f}));
  EXPECT_EQ(stats.nan_count, 1);
  EXPECT_EQ(stats.inf_count, 2);
  EXPECT_EQ(stats.min, 1);
  EXPECT_EQ(stats.max, 3);
  EXPECT_EQ(stats.mean, 2);
  EXPECT_EQ(stats.std, std::sqrt(2.0));  // torch.tensor([1., 3.]).std()
  // One finite value has no sample spread: nan, as torch.std of one value.
  EXPECT_TRUE(std::isnan(ComputeTensorStats(at::tensor({4.0f, NAN})).std));

  // No finite value: no minimum, maximum, mean or spread (nan in text, null in JSON).
  stats = ComputeTensorStats(at::full({64}, NAN));
  EXPECT_EQ(stats.nan_count, 64);
  EXPECT_TRUE(std::isnan(stats.min) && std::isnan(stats.max));
  EXPECT_TRUE(std::isnan(stats.mean) && std::isnan(stats.std));
  InspectReport report;
  report.tensors.push_back(
      {TensorInfo{"w", "F32", at::kFloat, {64}, 256, "model.safetensors"}, stats});
  EXPECT_THAT(FormatInspectReport(report),
              HasSubstr("min nan max nan mean nan std nan nan 64 inf 0"));
  const nlohmann::json json = InspectReportToJson(report).at("tensors")[0].at("stats");
  for (const char* key : {"min", "max", "mean", "std"}) {
    EXPECT_TRUE(json.at(key).is_null()) << key;
  }
}

TEST(InspectTest, ListsTitanTensorsAndVerifiesChecksums) {
  const std::string root = TestDir("titan");
  const CheckpointState state = SmallState(1);
  ASSERT_TRUE(CheckpointManager(root, 0).Save(12, state, /*model_only=*/true).ok());
  InspectOptions options;
  options.stats = true;
  options.verify = true;
  absl::StatusOr<InspectReport> report = InspectCheckpoint(root, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->format, "titan");
  EXPECT_EQ(report->step, 12);
  EXPECT_EQ(report->model, "llama3");
  EXPECT_EQ(report->flavor, "");
  EXPECT_EQ(report->architecture, "dim 32, 1 layers, 4/2 heads of 16, ffn 96, vocab 24");
  // A shape no flavor has is "custom" in --json too, as in the text.
  EXPECT_EQ(InspectReportToJson(*report).at("flavor"), "custom");
  ASSERT_EQ(report->tensors.size(), state.model.size());
  EXPECT_EQ(report->tensors[0].info.name, "tok_embeddings.weight");
  EXPECT_THAT(report->tensors[0].info.shape, ElementsAre(24, 32));
  EXPECT_EQ(report->tensors[0].info.bytes, 24u * 32 * 4);
  EXPECT_NEAR(report->tensors[0].stats->mean, state.model[0].second.mean().item<double>(), 1e-6);
  EXPECT_TRUE(report->problems.empty());
  EXPECT_THAT(FormatInspectReport(*report), HasSubstr("verify: OK"));
  EXPECT_THAT(FormatInspectReport(*report),
              HasSubstr("format titan, step 12, model llama3 custom (dim 32, 1 layers"));

  // Flip one byte of the last tensor: the CRC check names it.
  const std::string file = root + "/step-12/model.safetensors";
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const off_t end = ::lseek(fd, -1, SEEK_END);
  char byte;
  ASSERT_EQ(::pread(fd, &byte, 1, end), 1);
  byte ^= 0x10;
  ASSERT_EQ(::pwrite(fd, &byte, 1, end), 1);
  ::close(fd);
  report = InspectCheckpoint(root + "/step-12", options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_THAT(report->problems[0], HasSubstr("model.safetensors: tensor '"));
  EXPECT_THAT(report->problems[0], HasSubstr("CRC-32"));
  // Statistics read the bytes too: a tensor failing its CRC is damage found, as under --verify.
  options.verify = false;
  report = InspectCheckpoint(root, options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->damaged.size(), 1u);
  EXPECT_THAT(report->damaged[0], HasSubstr("model.safetensors: tensor '"));
  EXPECT_THAT(report->damaged[0], HasSubstr("CRC-32"));
  int without_stats = 0;
  for (const InspectedTensor& tensor : report->tensors) without_stats += !tensor.stats.has_value();
  EXPECT_EQ(without_stats, 1);
  EXPECT_THAT(FormatInspectReport(*report),
              HasSubstr("  damaged: 1 file(s)\n    " + report->damaged[0] + "\n"));
  // So is a comparison's read: that tensor is not compared, and the damage is named.
  absl::StatusOr<DiffReport> diff = DiffCheckpoints(root, root, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_FALSE(diff->within_tolerance());
  EXPECT_THAT(diff->damaged, ElementsAre(report->damaged[0]));
  EXPECT_EQ(diff->compared, static_cast<int64_t>(report->tensors.size()) - 1);
  EXPECT_THAT(FormatDiffReport(*diff), HasSubstr("DAMAGED\n  damaged: " + report->damaged[0]));
  EXPECT_EQ(DiffReportToJson(*diff).at("damaged")[0], report->damaged[0]);
}

// A tensor that ranks saved in pieces lies in several files: --json names them, and "file" holds
// only a file name.
TEST(InspectTest, NamesEveryFileOfATensorSavedInPieces) {
  const std::string root = TestDir("pieces");
  const CheckpointState whole = SmallState(7);
  std::vector<CheckpointState> halves(2);
  for (int rank = 0; rank < 2; ++rank) {
    for (const auto& [name, tensor] : whole.model) {
      const int64_t rows = tensor.size(0) / 2;
      halves[rank].model.emplace_back(name, tensor.narrow(0, rank * rows, rows).clone());
      std::vector<int64_t> offsets(tensor.dim(), 0);
      offsets[0] = rank * rows;
      halves[rank].boxes[name] = {tensor.sizes().vec(), offsets};
    }
  }
  halves[0].extra = whole.extra;
  std::vector<absl::Status> saved(2);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      CheckpointManager manager(root, 0, {rank, 2, "pieces", absl::Seconds(30)});
      saved[rank] = manager.Save(1, halves[rank], /*model_only=*/true);
    });
  }
  for (std::thread& rank : ranks) rank.join();
  ASSERT_TRUE(saved[0].ok() && saved[1].ok()) << saved[0] << saved[1];

  absl::StatusOr<InspectReport> report = InspectCheckpoint(root, InspectOptions());
  ASSERT_TRUE(report.ok()) << report.status();
  const nlohmann::json tensor = InspectReportToJson(*report).at("tensors")[0];
  EXPECT_EQ(tensor.at("name"), "tok_embeddings.weight");
  EXPECT_FALSE(tensor.contains("file")) << tensor;
  EXPECT_EQ(tensor.at("pieces"), 2);
  EXPECT_EQ(tensor.at("files"),
            nlohmann::json({"model.safetensors", "model-00001-of-00002.safetensors"}));
  EXPECT_THAT(
      FormatInspectReport(*report),
      ::testing::ContainsRegex("tok_embeddings.weight +F32 +\\[24, 32\\] +3072  2 pieces\n"));
}

// A truncated or missing file is a finding about the checkpoint, not a reason to describe none of
// it: the tensors are listed from the manifest and the damaged file is named.
TEST(InspectTest, DescribesWhatItCanOfAStepWithADamagedFile) {
  const std::string root = TestDir("damaged");
  CheckpointState state = SmallState(1);
  for (const auto& [name, tensor] : state.model) {
    state.optimizer.emplace_back(name + ".exp_avg", at::zeros_like(tensor));
  }
  ASSERT_TRUE(CheckpointManager(root, 0).Save(5, state, /*model_only=*/false).ok());
  const std::string optimizer = root + "/step-5/optimizer.safetensors";
  ASSERT_EQ(::truncate(optimizer.c_str(), 1000), 0);
  InspectOptions options;
  options.stats = true;
  absl::StatusOr<InspectReport> report = InspectCheckpoint(root, options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->model, "llama3");
  ASSERT_EQ(report->tensors.size(), state.model.size());
  EXPECT_TRUE(report->tensors[0].stats.has_value());
  ASSERT_EQ(report->damaged.size(), 1u);
  EXPECT_THAT(report->damaged[0], HasSubstr(optimizer + ": "));
  EXPECT_THAT(FormatInspectReport(*report), HasSubstr("  damaged: 1 file(s)\n    " + optimizer));
  EXPECT_EQ(InspectReportToJson(*report).at("damaged")[0], report->damaged[0]);
  // --verify lists it among its problems, and checks the other files' CRCs.
  options.verify = true;
  report = InspectCheckpoint(root, options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->problems.size(), 1u);
  EXPECT_THAT(report->problems[0], HasSubstr(optimizer + ": "));
  EXPECT_THAT(FormatInspectReport(*report), HasSubstr("verify: 1 problem(s)"));

  // A missing model file: the tensors are still listed (without statistics), the file named.
  ASSERT_TRUE(RemoveTree(root + "/step-5/model.safetensors").ok());
  report = InspectCheckpoint(root, options);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->tensors.size(), state.model.size());
  EXPECT_FALSE(report->tensors[0].stats.has_value());
  ASSERT_EQ(report->damaged.size(), 2u);
  EXPECT_THAT(report->damaged[0], HasSubstr(root + "/step-5/model.safetensors: "));
  EXPECT_EQ(report->problems.size(), 2u);
  // A comparison names the damaged files, and compares no tensor of them.
  absl::StatusOr<DiffReport> diff = DiffCheckpoints(root, root, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_EQ(diff->damaged, report->damaged);
  EXPECT_EQ(diff->compared, 0);
  EXPECT_FALSE(diff->within_tolerance());
}

// A Meta checkpoint's unreadable consolidated.00.pth is damage found, as a titan or HF file's:
// the model is params.json's, the file named, and a comparison says so.
TEST(InspectTest, NamesADamagedMetaWeightsFile) {
  const std::string titan = TestDir("meta_damage_titan"), meta = TestDir("meta_damage");
  // A shape params.json can express: head_dim dim / n_heads, ffn from multiple_of.
  TransformerArgs args = SmallModel("llama3").args;
  args.head_dim = 8;
  args.rope.original_max_position_embeddings = 8192;
  const ModelInfo info = DescribeModel(**FindModel("llama3"), args, 1, 2);
  at::manual_seed(4);
  CheckpointState state;
  for (const auto& [name, shape] : ParameterShapes(*info.spec, info.args)) {
    state.model.emplace_back(name, at::randn(shape));
  }
  state.extra["model"] = ModelInfoToJson(info);
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, state, true).ok());
  ConvertOptions options;
  options.to = CheckpointFormat::kMeta;
  const absl::StatusOr<ConvertSummary> converted = ConvertCheckpoint(titan, meta, options);
  ASSERT_TRUE(converted.ok()) << converted.status();
  const std::string weights = meta + "/consolidated.00.pth";
  ASSERT_EQ(::truncate(weights.c_str(), 5000), 0);
  for (const bool verify : {false, true}) {
    InspectOptions inspect;
    inspect.verify = verify;
    inspect.stats = !verify;
    absl::StatusOr<InspectReport> report = InspectCheckpoint(meta, inspect);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->model, "llama3") << report->model_unknown_reason;
    ASSERT_EQ(report->damaged.size(), 1u);
    EXPECT_THAT(report->damaged[0], HasSubstr(weights + ": "));
    if (verify) {
      EXPECT_EQ(report->problems, report->damaged);
    }
  }
  absl::StatusOr<DiffReport> diff = DiffCheckpoints(meta, titan, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  ASSERT_EQ(diff->damaged.size(), 1u);
  EXPECT_THAT(diff->damaged[0], HasSubstr(weights + ": "));
  EXPECT_FALSE(diff->within_tolerance());
}

// An HF folder's damaged file lists no tensors: the model is the one config.json describes, as a
// titan step's is its manifest's, not "unknown" for tensors the damage hid.
TEST(InspectTest, NamesTheModelOfAnHfFolderWithADamagedFile) {
  const std::string titan = TestDir("hf_damage_titan"), single = TestDir("hf_damage_single"),
                    sharded = TestDir("hf_damage_sharded");
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, SmallState(7), true).ok());
  ConvertOptions options;
  options.to = CheckpointFormat::kHf;
  ASSERT_TRUE(ConvertCheckpoint(titan, single, options).ok());
  options.max_shard_bytes = 40000;  // Two shards of the 68 kB.
  ASSERT_TRUE(ConvertCheckpoint(titan, sharded, options).ok());
  const std::string truncated = single + "/model.safetensors";
  ASSERT_EQ(::truncate(truncated.c_str(), 1000), 0);
  const std::string missing = sharded + "/model-00002-of-00002.safetensors";
  ASSERT_TRUE(PathExists(missing));
  ASSERT_TRUE(RemoveTree(missing).ok());
  InspectOptions verify;
  verify.verify = true;
  for (const auto& [folder, file] : {std::pair(single, truncated), std::pair(sharded, missing)}) {
    absl::StatusOr<InspectReport> report = InspectCheckpoint(folder, verify);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->model, "llama3") << report->model_unknown_reason;
    EXPECT_THAT(FormatInspectReport(*report), HasSubstr(", model llama3 custom (dim 32"));
    EXPECT_TRUE(InspectReportToJson(*report).at("model_unknown_reason").is_null());
    ASSERT_EQ(report->damaged.size(), 1u);
    EXPECT_THAT(report->damaged[0], HasSubstr(file + ": "));
    // The index's metadata.total_size is no problem: the damaged shard's tensors went uncounted.
    EXPECT_THAT(report->problems, ElementsAre(report->damaged[0]));
    // --diff --verify names it on either side, as a damaged titan or Meta side; without --verify
    // the folder is one it cannot read, as InspectCheckpoint reads it.
    for (const auto& [a, b] : {std::pair(titan, folder), std::pair(folder, titan)}) {
      absl::StatusOr<DiffReport> diff = DiffCheckpoints(a, b, 0, 0, /*verify=*/true);
      ASSERT_TRUE(diff.ok()) << diff.status();
      EXPECT_THAT(diff->damaged, ElementsAre(report->damaged[0]));
      EXPECT_FALSE(diff->within_tolerance());
      EXPECT_THAT(FormatDiffReport(*diff), HasSubstr("DAMAGED\n  damaged: " + file + ": "));
      EXPECT_THAT(DiffCheckpoints(a, b, 0, 0).status().message(), HasSubstr(file + ": "));
    }
  }
  // The readable tensors still contradict a config.json of another model.
  absl::StatusOr<std::string> config_text = ReadFile(sharded + "/config.json");
  ASSERT_TRUE(config_text.ok());
  nlohmann::json config = nlohmann::json::parse(*config_text);
  config["vocab_size"] = config["vocab_size"].get<int64_t>() * 2;
  ASSERT_TRUE(WriteFileAtomically(sharded + "/config.json", config.dump()).ok());
  absl::StatusOr<InspectReport> other = InspectCheckpoint(sharded, verify);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->model, "");
  EXPECT_THAT(other->model_unknown_reason, HasSubstr("checkpoint tensors do not match"));
}

// `safetensors` rewritten as a torch.save archive at `pickle` (what transformers wrote before
// safetensors), the tensors in the same order.
void WriteAsTorchSave(const std::string& safetensors, const std::string& pickle) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(safetensors);
  ASSERT_TRUE(file.ok()) << file.status();
  NamedTensors tensors;
  for (const SafetensorsEntry& entry : file->entries()) {
    tensors.emplace_back(entry.name, *file->Load(entry.name));
  }
  const std::string scratch = TestDir("torch_save_scratch");
  ASSERT_TRUE(MakeDirectories(scratch).ok());
  ASSERT_TRUE(WriteMetaCheckpoint(scratch, tensors, nlohmann::json::object()).ok());
  ASSERT_TRUE(RenamePath(scratch + "/consolidated.00.pth", pickle).ok());
  ASSERT_TRUE(RemoveTree(safetensors).ok());
}

// An HF folder with PyTorch pickle weights (torch.save archives) and no safetensors is read as
// transformers reads it: pytorch_model.bin, or the shards pytorch_model.bin.index.json lists; the
// same tensors as the safetensors they were written from. Shards without their index are refused
// naming them, and a shard the index names but the folder lacks is damage.
TEST(InspectTest, ReadsPickleWeightsAsTheirSafetensors) {
  const std::string titan = TestDir("pickle_titan"), single = TestDir("pickle_single"),
                    sharded = TestDir("pickle_sharded"), shards = TestDir("pickle_shards"),
                    indexed = TestDir("pickle_indexed"), reference = TestDir("pickle_reference");
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, SmallState(7), true).ok());
  ConvertOptions options;
  options.to = CheckpointFormat::kHf;
  ASSERT_TRUE(ConvertCheckpoint(titan, single, options).ok());
  ASSERT_TRUE(ConvertCheckpoint(titan, reference, options).ok());
  options.max_shard_bytes = 40000;  // Two shards of the 68 kB.
  for (const std::string& folder : {sharded, shards, indexed}) {
    ASSERT_TRUE(ConvertCheckpoint(titan, folder, options).ok());
  }
  WriteAsTorchSave(single + "/model.safetensors", single + "/pytorch_model.bin");
  // Each safetensors file becomes its pickle (sharded: the index only, shards: the shards only,
  // indexed: both), the index naming the pickles.
  for (const auto& [folder, keep_shards, keep_index] :
       {std::tuple(sharded, false, true), std::tuple(shards, true, false),
        std::tuple(indexed, true, true)}) {
    const absl::StatusOr<std::vector<std::string>> names = ListDirectory(folder);
    ASSERT_TRUE(names.ok()) << names.status();
    for (const std::string& name : *names) {
      const std::string path = folder + "/" + name;
      absl::string_view shard_number = name;  // "-0000i-of-0000n" of model-0000i-of-0000n.
      if (name == "model.safetensors.index.json") {
        std::string index = *ReadFile(path);
        index = absl::StrReplaceAll(
            index, {{"\"model-", "\"pytorch_model-"}, {".safetensors\"", ".bin\""}});
        ASSERT_TRUE(RemoveTree(path).ok());
        if (keep_index) {
          ASSERT_TRUE(WriteFileAtomically(folder + "/pytorch_model.bin.index.json", index).ok());
        }
      } else if (absl::ConsumePrefix(&shard_number, "model-") &&
                 absl::ConsumeSuffix(&shard_number, ".safetensors")) {
        if (keep_shards) {
          WriteAsTorchSave(path, absl::StrCat(folder, "/pytorch_model-", shard_number, ".bin"));
        } else {
          ASSERT_TRUE(RemoveTree(path).ok());
        }
      }
    }
  }
  InspectOptions verify;
  verify.verify = true;
  for (const std::string& folder : {single, indexed}) {
    absl::StatusOr<InspectReport> report = InspectCheckpoint(folder, verify);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->format, "hf");
    EXPECT_EQ(report->model, "llama3") << report->model_unknown_reason;
    EXPECT_TRUE(report->damaged.empty());
    EXPECT_THAT(report->problems, IsEmpty());  // The index's metadata.total_size too.
    absl::StatusOr<DiffReport> diff = DiffCheckpoints(folder, reference, 0, 0);
    ASSERT_TRUE(diff.ok()) << diff.status();
    EXPECT_TRUE(diff->identical()) << FormatDiffReport(*diff);
    EXPECT_EQ(diff->compared, static_cast<int64_t>(report->tensors.size()));
    // Converted, the same titan checkpoint and HF folder as the safetensors give.
    for (const auto& [to, file] : {std::pair(CheckpointFormat::kTitan, "/step-0/model.safetensors"),
                                   std::pair(CheckpointFormat::kHf, "/model.safetensors")}) {
      const std::string out = TestDir("pickle_out"), expected = TestDir("pickle_expected");
      ConvertOptions convert;
      convert.to = to;
      ASSERT_TRUE(ConvertCheckpoint(folder, out, convert).ok());
      ASSERT_TRUE(ConvertCheckpoint(reference, expected, convert).ok());
      EXPECT_EQ(ReadFile(out + file).value_or("(missing)"),
                ReadFile(expected + file).value_or("(missing from the reference)"));
    }
  }

  // The .bin index follows the safetensors index's rules: no shard outside the folder.
  const std::string index_path = indexed + "/pytorch_model.bin.index.json";
  const std::string index_text = *ReadFile(index_path);
  nlohmann::json escaping = nlohmann::json::parse(index_text);
  escaping["weight_map"]["model.norm.weight"] =
      "../pickle_indexed/pytorch_model-00001-of-00002.bin";
  ASSERT_TRUE(WriteFileAtomically(index_path, escaping.dump()).ok());
  EXPECT_EQ(InspectCheckpoint(indexed, InspectOptions()).status().message(),
            index_path +
                ": weight_map[\"model.norm.weight\"]: \"../pickle_indexed/"
                "pytorch_model-00001-of-00002.bin\" is outside the checkpoint folder (expected a "
                "path inside it)");
  // Beside its index, pytorch_model.bin is what transformers reads: the shards are not opened.
  ASSERT_TRUE(RenamePath(single + "/pytorch_model.bin", indexed + "/pytorch_model.bin").ok());
  ASSERT_TRUE(RemoveTree(indexed + "/pytorch_model-00001-of-00002.bin").ok());
  absl::StatusOr<DiffReport> single_read = DiffCheckpoints(indexed, reference, 0, 0);
  ASSERT_TRUE(single_read.ok()) << single_read.status();
  EXPECT_TRUE(single_read->identical()) << FormatDiffReport(*single_read);

  // Shards without their index are refused as safetensors shards are.
  const std::string unindexed =
      shards +
      ": holds PyTorch .bin shards (pytorch_model-00001-of-00002.bin, "
      "pytorch_model-00002-of-00002.bin) but no pytorch_model.bin.index.json, which maps each "
      "tensor to its shard (transformers too needs it): copy it from the shards' source";
  ConvertOptions from_hf;
  from_hf.from = CheckpointFormat::kHf;
  EXPECT_EQ(InspectCheckpoint(shards, InspectOptions()).status().message(), unindexed);
  EXPECT_EQ(InspectCheckpoint(shards, verify).status().message(), unindexed);
  EXPECT_EQ(ConvertCheckpoint(shards, TestDir("out"), ConvertOptions()).status().message(),
            unindexed);
  EXPECT_EQ(ConvertCheckpoint(shards, TestDir("out"), from_hf).status().message(), unindexed);

  // An index whose shards are gone: each is damage --verify lists, and fails a conversion.
  const absl::StatusOr<InspectReport> report = InspectCheckpoint(sharded, verify);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->damaged.size(), 2u);
  EXPECT_THAT(report->damaged[0], HasSubstr(sharded + "/pytorch_model-00001-of-00002.bin: "));
  EXPECT_THAT(report->problems, ElementsAreArray(report->damaged));
  EXPECT_THAT(
      std::string(ConvertCheckpoint(sharded, TestDir("out"), ConvertOptions()).status().message()),
      HasSubstr(sharded + "/pytorch_model-00001-of-00002.bin: "));
}

// A pytorch_model.bin that is no torch.save dict of tensors is damage naming it: a truncated one,
// one whose pickle calls another global (os.system: refused before anything runs), and one in
// torch.save's legacy format (before PyTorch 1.6).
TEST(InspectTest, UnreadablePickleWeightsAreDamageNamingTheFile) {
  const std::string titan = TestDir("bad_pickle_titan"), folder = TestDir("bad_pickle");
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, SmallState(7), true).ok());
  ConvertOptions options;
  options.to = CheckpointFormat::kHf;
  ASSERT_TRUE(ConvertCheckpoint(titan, folder, options).ok());
  const std::string weights = folder + "/pytorch_model.bin";
  WriteAsTorchSave(folder + "/model.safetensors", weights);
  const std::string good = *ReadFile(weights);
  // {"w": os.system("true")} as Python's pickle writes it (os.system is posix.system).
  std::string evil;
  {
    caffe2::serialize::PyTorchStreamWriter zip([&](const void* data, size_t size) {
      evil.append(static_cast<const char*>(data), size);
      return size;
    });
    const std::string pickle(
        "\x80\x02}q\x00X\x01\x00\x00\x00wq\x01"
        "cposix\nsystem\nq\x02X\x04\x00\x00\x00trueq\x03\x85q\x04Rq\x05s.",
        48);
    zip.writeRecord("data.pkl", pickle.data(), pickle.size());
    zip.writeEndOfFile();
  }
  std::string legacy("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19\x2e", 15);
  for (const auto& [bytes, why] :
       {std::pair(good.substr(0, 1000), std::string(": not a torch.save state dict of tensors: ")),
        std::pair(evil, std::string(": not a torch.save state dict of tensors: data.pkl: byte 13: "
                                    "GLOBAL posix.system: expected a global of a dict of tensors")),
        std::pair(legacy, std::string(": torch.save's legacy format (PyTorch before 1.6, not a zip "
                                      "archive), which titan does not read"))}) {
    ASSERT_TRUE(WriteFileAtomically(weights, bytes).ok());
    InspectOptions verify;
    verify.verify = true;
    absl::StatusOr<InspectReport> report = InspectCheckpoint(folder, verify);
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_EQ(report->damaged.size(), 1u);
    EXPECT_THAT(report->damaged[0], StartsWith(weights + why));
    EXPECT_THAT(
        std::string(ConvertCheckpoint(folder, TestDir("out"), ConvertOptions()).status().message()),
        StartsWith(weights + why));
  }
}

// Safetensors shards without their index are refused naming the shards and the missing index
// (transformers too needs it), rather than as a folder missing model.safetensors. Beside a
// pytorch_model.bin, that is what transformers reads, and titan too.
TEST(InspectTest, RefusesSafetensorsShardsWithoutTheirIndexNamingThem) {
  const std::string titan = TestDir("unindexed_titan"), folder = TestDir("unindexed");
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, SmallState(7), true).ok());
  ConvertOptions options;
  options.max_shard_bytes = 40000;  // Two shards of the 68 kB.
  ASSERT_TRUE(ConvertCheckpoint(titan, folder, options).ok());
  ASSERT_TRUE(RemoveTree(folder + "/model.safetensors.index.json").ok());
  const std::string expected =
      folder +
      ": holds safetensors shards (model-00001-of-00002.safetensors, "
      "model-00002-of-00002.safetensors) but no model.safetensors.index.json, which maps each "
      "tensor to its shard (transformers too needs it): copy it from the shards' source";
  InspectOptions verify;
  verify.verify = true;
  ConvertOptions from_hf;
  from_hf.from = CheckpointFormat::kHf;
  EXPECT_EQ(InspectCheckpoint(folder, InspectOptions()).status().message(), expected);
  EXPECT_EQ(InspectCheckpoint(folder, verify).status().message(), expected);
  EXPECT_EQ(ConvertCheckpoint(folder, TestDir("out"), ConvertOptions()).status().message(),
            expected);
  EXPECT_EQ(ConvertCheckpoint(folder, TestDir("out"), from_hf).status().message(), expected);

  ASSERT_TRUE(WriteFileAtomically(folder + "/pytorch_model.bin", "x").ok());
  const std::string read_pickle =
      folder + "/pytorch_model.bin: not a torch.save state dict of tensors: ";
  EXPECT_THAT(std::string(InspectCheckpoint(folder, InspectOptions()).status().message()),
              StartsWith(read_pickle));
  EXPECT_THAT(std::string(ConvertCheckpoint(folder, TestDir("out"), from_hf).status().message()),
              StartsWith(read_pickle));
}

// A root holding only what unfinished saves left says so rather than "unknown checkpoint format".
TEST(InspectTest, SaysARootHoldsNoCommittedStep) {
  const std::string root = TestDir("uncommitted");
  for (const char* name : {"step-6.abandoned-77", "step-5.tmp-123", "notes"}) {
    ASSERT_TRUE(MakeDirectories(absl::StrCat(root, "/", name)).ok());
  }
  const std::string expected = root +
                               ": no committed step, only step-5.tmp-123, step-6.abandoned-77 "
                               "(.tmp*: a save that did not finish; .abandoned-*, .unfinished-*: "
                               "steps a restart set aside, renamed back to step-N to be read)";
  EXPECT_EQ(InspectCheckpoint(root, InspectOptions()).status().message(), expected);
  ConvertOptions options;
  EXPECT_EQ(ConvertCheckpoint(root, TestDir("out"), options).status().message(), expected);
  options.from = CheckpointFormat::kTitan;
  EXPECT_EQ(ConvertCheckpoint(root, TestDir("out"), options).status().message(), expected);
}

// A step folder without a manifest (an interrupted copy) is named with what to do about it, by the
// tools and by the trainer's resume, which opens steps through CheckpointStep too.
TEST(InspectTest, AStepWithoutAManifestSaysWhatToDo) {
  const std::string root = TestDir("empty_step");
  ASSERT_TRUE(CheckpointManager(root, 0).Save(4, SmallState(1), true).ok());
  ASSERT_TRUE(MakeDirectories(root + "/step-5").ok());
  const std::string expected =
      root +
      "/step-5/manifest.json: open failed: No such file or directory (a step folder without its "
      "manifest: an interrupted copy? Remove the folder, or read another step: its step-N folder "
      "as the path, or titan_train's --checkpoint.load_step)";
  EXPECT_EQ(InspectCheckpoint(root, InspectOptions()).status().message(), expected);
  EXPECT_EQ(ConvertCheckpoint(root, TestDir("out"), ConvertOptions()).status().message(), expected);
  EXPECT_EQ(CheckpointStep::Open(root + "/step-5", 5).status().message(), expected);
  EXPECT_TRUE(InspectCheckpoint(root + "/step-4", InspectOptions()).ok());
}

// A checkpoint's JSON file with a syntax error is named with where the error is, whichever file:
// HF's config.json and index, Meta's params.json, a titan step's manifest.
TEST(InspectTest, MalformedJsonNamesTheFileLineAndColumn) {
  const std::string titan = TestDir("json_titan"), hf = TestDir("json_hf"),
                    meta = TestDir("json_meta");
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, SmallState(2), true).ok());
  ConvertOptions options;
  options.to = CheckpointFormat::kHf;
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, options).ok());
  ASSERT_TRUE(MakeDirectories(meta).ok());  // params.json makes it a Meta checkpoint, read first.
  const auto error_for = [](const std::string& path, const std::string& text,
                            const std::string& checkpoint) {
    EXPECT_TRUE(WriteFileAtomically(path, text).ok());
    const absl::StatusOr<InspectReport> report = InspectCheckpoint(checkpoint, InspectOptions());
    if (report.ok()) return absl::StrJoin(report->damaged, "; ");  // A bad index is damage.
    return std::string(report.status().message());
  };

  const std::string shard = hf + "/model-00001-of-00001.safetensors";
  ASSERT_EQ(::rename((hf + "/model.safetensors").c_str(), shard.c_str()), 0);
  EXPECT_THAT(error_for(hf + "/model.safetensors.index.json",
                        "{\"metadata\": {},, \"weight_map\": {}}", hf),
              HasSubstr(hf + "/model.safetensors.index.json: invalid JSON: "
                             "[json.exception.parse_error.101] parse error at line 1, column 17"));
  EXPECT_THAT(
      error_for(hf + "/config.json", "{\"model_type\": \"llama\",,\n \"hidden_size\": 64}", hf),
      HasSubstr(hf + "/config.json: invalid JSON: [json.exception.parse_error.101] parse "
                     "error at line 1, column 24"));
  EXPECT_THAT(error_for(meta + "/params.json", "{\"dim\": 64,, \"n_layers\": 2}", meta),
              HasSubstr(meta + "/params.json: invalid JSON: [json.exception.parse_error.101] "
                               "parse error at line 1, column 12"));
  EXPECT_THAT(
      error_for(titan + "/step-1/manifest.json", "{\n\"format_version\": 2,,}", titan),
      HasSubstr(titan + "/step-1/manifest.json: invalid JSON: "
                        "[json.exception.parse_error.101] parse error at line 2, column 21"));
}

TEST(InspectTest, DescribesQwen3CheckpointsInEveryFormat) {
  const std::string titan = TestDir("titan"), hf = TestDir("hf");
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, SmallState(3, "qwen3"), true).ok());
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, ConvertOptions()).ok());
  for (const std::string& path : {titan, hf}) {
    absl::StatusOr<InspectReport> report = InspectCheckpoint(path, InspectOptions());
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->model, "qwen3");
    EXPECT_THAT(FormatInspectReport(*report),
                HasSubstr("model qwen3 custom (dim 32, 1 layers, 4/2 heads of 16, ffn 96, vocab "
                          "24, qk-norm)"));
    EXPECT_EQ(InspectReportToJson(*report).at("architecture"), report->architecture);
  }
  absl::StatusOr<DiffReport> diff = DiffCheckpoints(titan, hf, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->identical()) << FormatDiffReport(*diff);
  EXPECT_EQ(diff->compared, 1 + 11 + 2);  // embedding, one layer with q/k norms, norm, output
}

TEST(InspectTest, AnUnknownModelSaysWhy) {
  const std::string titan = TestDir("why_titan"), hf = TestDir("why_hf");
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, SmallState(6), true).ok());
  ConvertOptions options;
  options.to = CheckpointFormat::kHf;
  ASSERT_TRUE(ConvertCheckpoint(titan, hf, options).ok());
  nlohmann::json config = nlohmann::json::parse(std::ifstream(hf + "/config.json"));
  config["hidden_act"] = "gelu";
  std::ofstream(hf + "/config.json") << config.dump();
  absl::StatusOr<InspectReport> report = InspectCheckpoint(hf, InspectOptions());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->model, "");
  EXPECT_THAT(report->model_unknown_reason, HasSubstr("hidden_act"));
  EXPECT_THAT(FormatInspectReport(*report), HasSubstr(", model unknown (" + hf));
  EXPECT_EQ(InspectReportToJson(*report).at("model_unknown_reason"), report->model_unknown_reason);
  // No model: null, not "", for a script that tests for null.
  for (const char* field : {"model", "flavor", "architecture"}) {
    EXPECT_TRUE(InspectReportToJson(*report).at(field).is_null()) << field;
  }
}

TEST(InspectTest, DiffFindsArchitecturesThatDifferWithTheSameTensors) {
  // The same tensors under another norm_eps are another model.
  const std::string a = TestDir("arch_a"), b = TestDir("arch_b");
  CheckpointState state = SmallState(4);
  ASSERT_TRUE(CheckpointManager(a, 0).Save(1, state, true).ok());
  ModelInfo other = SmallModel("llama3");
  other.args.norm_eps = 1e-3;
  state.extra["model"] = ModelInfoToJson(other);
  ASSERT_TRUE(CheckpointManager(b, 0).Save(1, state, true).ok());
  absl::StatusOr<DiffReport> diff = DiffCheckpoints(a, b, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->different.empty());
  EXPECT_FALSE(diff->identical());
  EXPECT_THAT(diff->architecture, HasSubstr("norm_eps 1e-05 vs 0.001"));
  EXPECT_THAT(FormatDiffReport(*diff), HasSubstr("  architecture: norm_eps"));
  EXPECT_EQ(DiffReportToJson(*diff).at("architecture"), diff->architecture);
  EXPECT_TRUE(DiffReportToJson(*DiffCheckpoints(a, a, 0, 0)).at("architecture").is_null());
}

// Rewrites `hf`'s model.safetensors with lm_head.weight = `head`.
void AddTensor(const std::string& hf, const std::string& name, const at::Tensor& tensor) {
  const std::string path = hf + "/model.safetensors";
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  NamedTensors tensors;
  for (const std::string& name : file->names()) tensors.emplace_back(name, *file->Load(name));
  tensors.emplace_back(name, tensor);
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
}

// `info`'s parameters, random (seeded), with its model entry: a titan step's state.
CheckpointState RandomState(const ModelInfo& info, uint64_t seed) {
  CheckpointState state;
  at::manual_seed(seed);
  for (const auto& [name, shape] : ParameterShapes(*info.spec, info.args)) {
    state.model.emplace_back(name, at::randn(shape));
  }
  state.extra["model"] = ModelInfoToJson(info);
  return state;
}

// An HF folder with older transformers' rotary_emb.inv_freq buffers is the model without them:
// loading drops them. Left out, with a note, against a checkpoint that lacks them, whatever its
// format.
TEST(InspectTest, DiffLeavesOutRotaryInverseFrequencyBuffers) {
  const CheckpointState state = RandomState(SmallModel("llama3"), 10);
  const std::string titan = TestDir("inv_titan"), plain = TestDir("inv_hf"),
                    buffers = TestDir("inv_hf_buffers");
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, state, true).ok());
  ConvertOptions options;
  options.to = CheckpointFormat::kHf;
  for (const std::string& hf : {plain, buffers})
    ASSERT_TRUE(ConvertCheckpoint(titan, hf, options).ok());
  AddTensor(buffers, "model.layers.0.self_attn.rotary_emb.inv_freq", at::ones({4}));
  absl::StatusOr<DiffReport> diff = DiffCheckpoints(buffers, plain, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->identical()) << FormatDiffReport(*diff);
  EXPECT_THAT(diff->notes, ElementsAre("1 rotary_emb.inv_freq buffer(s) in the first left out: "
                                       "transformers drops them on load (RoPE comes from "
                                       "config.json)"));
  diff = DiffCheckpoints(titan, buffers, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->identical()) << FormatDiffReport(*diff);
  EXPECT_THAT(diff->notes, ElementsAre("1 rotary_emb.inv_freq buffer(s) in the second left out: "
                                       "transformers drops them on load (RoPE comes from "
                                       "config.json)"));
  diff = DiffCheckpoints(buffers, buffers, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->identical() && diff->notes.empty()) << FormatDiffReport(*diff);
}

// A tied model's HF folder with lm_head.weight, a copy of the embedding (as older writers saved),
// is the same model as one without (as transformers saves it): the copy is the tie, noted. A head
// that differs from the embedding is reported.
TEST(InspectTest, DiffTakesATiedHeadsCopyForTheTie) {
  ModelInfo info = SmallModel("llama3");
  info.args.tie_word_embeddings = true;
  const CheckpointState state = RandomState(DescribeModel(*info.spec, info.args), 9);
  const std::string titan = TestDir("tied_titan"), plain = TestDir("tied_hf"),
                    copied = TestDir("tied_hf_copy"), distinct = TestDir("tied_hf_head");
  ASSERT_TRUE(CheckpointManager(titan, 0).Save(1, state, true).ok());
  ConvertOptions options;
  options.to = CheckpointFormat::kHf;
  for (const std::string& hf : {plain, copied, distinct}) {
    ASSERT_TRUE(ConvertCheckpoint(titan, hf, options).ok());
  }
  const at::Tensor embedding = state.model[0].second;
  ASSERT_EQ(state.model[0].first, "tok_embeddings.weight");
  AddTensor(copied, "lm_head.weight", embedding);
  AddTensor(distinct, "lm_head.weight", embedding + 1);

  const std::string note =
      "lm_head.weight in the first equals model.embed_tokens.weight bitwise: the tie its "
      "config.json declares (tie_word_embeddings true), not a tensor of its own";
  for (const std::string& other : {plain, titan}) {
    absl::StatusOr<DiffReport> diff = DiffCheckpoints(copied, other, 0, 0);
    ASSERT_TRUE(diff.ok()) << diff.status();
    EXPECT_TRUE(diff->identical()) << FormatDiffReport(*diff);
    EXPECT_THAT(diff->notes, ElementsAre(note)) << other;
    EXPECT_THAT(FormatDiffReport(*diff), HasSubstr(": identical\n  note: " + note + "\n"));
    EXPECT_EQ(DiffReportToJson(*diff).at("notes"), nlohmann::json({note}));
  }
  absl::StatusOr<DiffReport> diff = DiffCheckpoints(plain, copied, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->identical()) << FormatDiffReport(*diff);
  EXPECT_THAT(diff->notes, ElementsAre(HasSubstr("lm_head.weight in the second equals")));
  // Both hold the copy: compared as any tensor, nothing to note.
  diff = DiffCheckpoints(copied, copied, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->identical() && diff->notes.empty()) << FormatDiffReport(*diff);

  // A head of its own: another model, and the head is named.
  diff = DiffCheckpoints(plain, distinct, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_FALSE(diff->within_tolerance());
  EXPECT_THAT(diff->only_in_second, ElementsAre("lm_head.weight"));
  EXPECT_THAT(diff->notes, ElementsAre("lm_head.weight in the second differs from "
                                       "model.embed_tokens.weight though its config.json ties "
                                       "them (tie_word_embeddings true): transformers reads that "
                                       "model untied"));
}

TEST(InspectTest, DiffFindsChangedMissingAndToleratedTensors) {
  const std::string a = TestDir("a"), b = TestDir("b"), hf = TestDir("hf");
  CheckpointState state = SmallState(2);
  ASSERT_TRUE(CheckpointManager(a, 0).Save(1, state, true).ok());

  // Identical to its own HF export, compared across formats in titan's layout.
  ConvertOptions options;
  options.to = CheckpointFormat::kHf;
  ASSERT_TRUE(ConvertCheckpoint(a, hf, options).ok());
  absl::StatusOr<DiffReport> diff = DiffCheckpoints(a, hf, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->identical()) << FormatDiffReport(*diff);
  EXPECT_EQ(diff->compared, static_cast<int64_t>(state.model.size()));

  state.model[0].second = state.model[0].second.clone();
  state.model[0].second[3][4] += 0.5;
  state.model.back().first = "renamed.weight";
  ASSERT_TRUE(CheckpointManager(b, 0).Save(1, state, true).ok());
  diff = DiffCheckpoints(a, b, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_FALSE(diff->identical());
  ASSERT_EQ(diff->different.size(), 1u);
  EXPECT_EQ(diff->different[0].name, "tok_embeddings.weight");
  EXPECT_NEAR(*diff->different[0].max_abs_diff, 0.5, 1e-6);
  EXPECT_EQ(diff->only_in_first.size(), 1u);
  EXPECT_THAT(diff->only_in_second, ElementsAre("renamed.weight"));
  EXPECT_THAT(FormatDiffReport(*diff), HasSubstr("DIFFERENT"));

  diff = DiffCheckpoints(a, b, 0, 0.6);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->different.empty());

  // Values that differ within the tolerances are not called identical: bitwise-equal is one thing,
  // within tolerance another.
  const std::string near = TestDir("near");
  CheckpointState nudged = SmallState(2);
  nudged.model[0].second = nudged.model[0].second.clone();
  nudged.model[0].second[1][2] += 1e-4;
  ASSERT_TRUE(CheckpointManager(near, 0).Save(1, nudged, true).ok());
  diff = DiffCheckpoints(a, near, 1e-2, 1e-3);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->within_tolerance());
  EXPECT_FALSE(diff->identical());
  ASSERT_EQ(diff->tolerated.size(), 1u);
  EXPECT_EQ(diff->tolerated[0].name, "tok_embeddings.weight");
  EXPECT_NEAR(diff->tolerated[0].max_abs_diff, 1e-4, 1e-6);
  EXPECT_THAT(FormatDiffReport(*diff),
              StartsWith(absl::StrCat("compared ", state.model.size(),
                                      " tensors: within tolerance (rtol 0.01, atol "
                                      "0.001): 1 differ, by at most ")));
  nlohmann::json near_json = DiffReportToJson(*diff);
  EXPECT_EQ(near_json.at("identical"), false);
  EXPECT_EQ(near_json.at("within_tolerance"), true);
  EXPECT_EQ(near_json.at("tolerated")[0].at("name"), "tok_embeddings.weight");
  near_json = DiffReportToJson(*DiffCheckpoints(a, a, 1e-2, 1e-3));
  EXPECT_EQ(near_json.at("identical"), true);
  EXPECT_EQ(near_json.at("within_tolerance"), true);
  EXPECT_THAT(FormatDiffReport(*DiffCheckpoints(a, a, 1e-2, 1e-3)), HasSubstr(": identical\n"));

  // NaN against a number is counted apart from the finite elements' differences (the relative
  // one too, with the NaN in the second checkpoint); a shape mismatch compares no values; a dtype
  // mismatch differs within any tolerance.
  state = SmallState(2);
  double rel_diff = 0;
  for (auto& [name, tensor] : state.model) {
    if (name == "tok_embeddings.weight") {
      tensor = tensor.clone();
      tensor[0][0] = NAN;
      tensor[0][1] += 0.25;
      rel_diff = 0.25 / std::abs(tensor[0][1].item<double>());
    }
    if (name == "norm.weight") tensor = at::zeros({2});
    if (name == "output.weight") tensor = tensor.to(at::kBFloat16);
  }
  const std::string c = TestDir("c");
  ASSERT_TRUE(CheckpointManager(c, 0).Save(1, state, true).ok());
  diff = DiffCheckpoints(a, c, 0, 1);
  ASSERT_TRUE(diff.ok()) << diff.status();
  const std::string text = FormatDiffReport(*diff);
  ASSERT_EQ(diff->different.size(), 3u) << text;  // In name order.
  EXPECT_EQ(diff->different[0].name, "norm.weight");
  EXPECT_FALSE(diff->different[0].max_abs_diff.has_value());
  EXPECT_EQ(diff->different[2].name, "tok_embeddings.weight");
  EXPECT_EQ(diff->different[2].nonfinite_mismatches, 1);
  EXPECT_NEAR(*diff->different[2].max_abs_diff, 0.25, 1e-6);
  EXPECT_NEAR(*diff->different[2].max_rel_diff, rel_diff, 1e-5 * rel_diff);
  EXPECT_THAT(text, ::testing::ContainsRegex("norm.weight +shape \\[32\\] vs \\[2\\]\n"));
  EXPECT_THAT(text, ::testing::ContainsRegex(
                        "output.weight +max abs diff [0-9.e-]+, max rel diff [0-9.e-]+; dtype "
                        "Float vs BFloat16\n"));
  EXPECT_THAT(text, HasSubstr(" (finite elements), 1 NaN/inf element(s) against another value\n"));
  const nlohmann::json different = DiffReportToJson(*diff).at("different");
  EXPECT_TRUE(different[0].at("max_abs_diff").is_null());
  EXPECT_EQ(different[2].at("nonfinite_mismatches"), 1);

  // A negative tolerance would call identical tensors different.
  EXPECT_EQ(DiffCheckpoints(a, a, -1, 0).status().message(),
            "--rtol: -1, expected a tolerance >= 0");
  EXPECT_EQ(DiffCheckpoints(a, a, 0, -0.5).status().message(),
            "--atol: -0.5, expected a tolerance >= 0");
}

// A value against a 0 differs by inf relatively, as torch.testing.assert_close says; --json keeps
// it, and an infinite tolerance, as the string "inf".
TEST(InspectTest, DiffCallsTheRelativeDifferenceFromZeroInfinite) {
  const std::string a = TestDir("rel_a"), b = TestDir("rel_b");
  CheckpointState state = SmallState(3);
  ASSERT_TRUE(CheckpointManager(a, 0).Save(1, state, true).ok());
  for (auto& [name, tensor] : state.model) {
    if (name == "norm.weight") {
      tensor = tensor.clone();
      tensor[0] = 0;
    }
  }
  ASSERT_TRUE(CheckpointManager(b, 0).Save(1, state, true).ok());
  absl::StatusOr<DiffReport> diff = DiffCheckpoints(a, b, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  ASSERT_EQ(diff->different.size(), 1u) << FormatDiffReport(*diff);
  EXPECT_EQ(*diff->different[0].max_rel_diff, std::numeric_limits<double>::infinity());
  EXPECT_THAT(FormatDiffReport(*diff), HasSubstr(", max rel diff inf\n"));
  EXPECT_EQ(DiffReportToJson(*diff).at("different")[0].at("max_rel_diff"), "inf");

  diff = DiffCheckpoints(a, b, 0, std::numeric_limits<double>::infinity());
  ASSERT_TRUE(diff.ok()) << diff.status();
  ASSERT_EQ(diff->tolerated.size(), 1u) << FormatDiffReport(*diff);
  EXPECT_THAT(FormatDiffReport(*diff), ::testing::EndsWith(" absolute, inf relative\n"));
  const nlohmann::json json = DiffReportToJson(*diff);
  EXPECT_EQ(json.at("atol"), "inf");
  EXPECT_EQ(json.at("rtol"), 0);
  EXPECT_EQ(json.at("tolerated")[0].at("max_rel_diff"), "inf");
  // Two zeros do not differ.
  diff = DiffCheckpoints(b, b, 0, 0);
  ASSERT_TRUE(diff.ok()) << diff.status();
  EXPECT_TRUE(diff->identical()) << FormatDiffReport(*diff);
}

}  // namespace
}  // namespace titan
