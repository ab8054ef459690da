#include "lib/train/components.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/checkpoint_manager.h"
#include "lib/checkpoint/test_dir.h"
#include "lib/config/job_config.h"
#include "lib/interop/hf_config.h"
#include "lib/kernels/kernel_dispatch.h"
#include "lib/model/bf16_weight_copies.h"
#include "lib/util/directory.h"

namespace titan {
namespace {

// The switches are process-wide: each test leaves the defaults behind.
class ConfigureFusedKernelsTest : public testing::Test {
 protected:
  void TearDown() override {
    SetFusedKernels(true);
    SetBf16WeightCopiesEnabled(false);
  }

  static JobConfig Config(const std::vector<std::string>& disabled, bool fused = true) {
    JobConfig config = DefaultJobConfig();
    config.mutable_activation_checkpoint()->set_mode("none");
    config.mutable_compile()->set_fused_kernels(fused);
    for (const std::string& name : disabled) config.mutable_compile()->add_disabled_kernels(name);
    return config;
  }
};

TEST_F(ConfigureFusedKernelsTest, DisabledKernelsAreOffAndTheOthersOn) {
  ASSERT_TRUE(ConfigureFusedKernels(Config({"rope", "cross_entropy"})).ok());
  EXPECT_FALSE(FusedKernelEnabled(FusedKernel::kRope));
  EXPECT_FALSE(FusedKernelEnabled(FusedKernel::kCrossEntropy));
  EXPECT_TRUE(FusedKernelEnabled(FusedKernel::kSwiGlu));
  EXPECT_TRUE(FusedKernelEnabled(FusedKernel::kAdam));
  EXPECT_TRUE(Bf16WeightCopiesEnabled());
}

TEST_F(ConfigureFusedKernelsTest, Bf16CopiesNeedTheAdamKernelAndTheirOwnSwitch) {
  ASSERT_TRUE(ConfigureFusedKernels(Config({"adam"})).ok());
  EXPECT_FALSE(Bf16WeightCopiesEnabled());  // only the Adam kernel writes them
  ASSERT_TRUE(ConfigureFusedKernels(Config({"bf16_weight_copies"})).ok());
  EXPECT_TRUE(FusedKernelEnabled(FusedKernel::kAdam));
  EXPECT_FALSE(Bf16WeightCopiesEnabled());
  ASSERT_TRUE(ConfigureFusedKernels(Config({}, /*fused=*/false)).ok());
  EXPECT_FALSE(FusedKernelEnabled(FusedKernel::kAdam));
  EXPECT_FALSE(Bf16WeightCopiesEnabled());
  JobConfig checkpointed = Config({});
  checkpointed.mutable_activation_checkpoint()->set_mode("full");
  ASSERT_TRUE(ConfigureFusedKernels(checkpointed).ok());
  EXPECT_TRUE(FusedKernelEnabled(FusedKernel::kAdam));
  EXPECT_FALSE(Bf16WeightCopiesEnabled());  // recomputed forwards would hold them longer
}

TEST_F(ConfigureFusedKernelsTest, AnUnknownNameIsRefused) {
  // The config's choices refuse it first; a config built in code still gets a clear error.
  EXPECT_EQ(ConfigureFusedKernels(Config({"flash"})).message(),
            "unknown kernel \"flash\"; expected one of rope, swiglu, float8_cast, adam, "
            "bf16_weight_copies, cross_entropy, mixed_precision_linear");
}

// 2^31 - 1 positions of a 16-wide head: 8 frequencies in float64 (64 B) and 8 B of tokens each.
TEST(CheckSequencesFitInMemoryTest, AHugeSeqLenIsRefusedNamingItsKey) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  TransformerArgs args;
  args.dim = 256;
  args.n_heads = 16;
  JobConfig config = DefaultJobConfig();
  config.mutable_training()->set_local_batch_size(1);
  config.mutable_training()->set_seq_len(2147483647);
  EXPECT_EQ(
      CheckSequencesFitInMemory(config, args, 64 * kGiB).message(),
      "[training] seq_len = 2147483647 does not fit in memory: its RoPE tables (2147483647 "
      "positions x 8 frequencies in float64, 4 tables' worth while computed) and token batch "
      "(local_batch_size 1 x seq_len 2147483647, inputs and labels) alone take 528.0 GiB, and "
      "this process has 64.0 GiB left; lower seq_len");
  EXPECT_TRUE(CheckSequencesFitInMemory(config, args, 528 * kGiB).ok());
  // A tool that sets [training] seq_len from a key of its own (titan_rl) is refused by that key.
  EXPECT_TRUE(absl::StartsWith(
      CheckSequencesFitInMemory(config, args, 64 * kGiB, "[rl] max_seq_len").message(),
      "[rl] max_seq_len = 2147483647 does not fit in memory"));
  EXPECT_TRUE(absl::EndsWith(
      CheckSequencesFitInMemory(config, args, 64 * kGiB, "[rl] max_seq_len").message(),
      "; lower max_seq_len"));
  // Where the token batch is the larger part, the batch size is what to lower.
  config.mutable_training()->set_seq_len(8);
  config.mutable_training()->set_local_batch_size(int64_t{1} << 30);
  EXPECT_EQ(CheckSequencesFitInMemory(config, args, 16 * kGiB).message(),
            "[training] local_batch_size = 1073741824 does not fit in memory: its token batch "
            "(local_batch_size 1073741824 x seq_len 8, inputs and labels) and RoPE tables (8 "
            "positions x 8 frequencies in float64, 4 tables' worth while computed) alone take "
            "64.0 GiB, and this process has 16.0 GiB left; lower local_batch_size");
  // The larger part, but seq_len's tables alone do not fit: lowering the batch would not do.
  config.mutable_training()->set_seq_len(1 << 28);
  config.mutable_training()->set_local_batch_size(64);
  EXPECT_TRUE(absl::StartsWith(CheckSequencesFitInMemory(config, args, 32 * kGiB).message(),
                               "[training] seq_len = 268435456 does not fit in memory: its RoPE "
                               "tables (268435456 positions"));
  config.mutable_training()->set_local_batch_size(1);
  // A long context that fits is no concern of this check.
  config.mutable_training()->set_seq_len(1 << 20);
  EXPECT_TRUE(CheckSequencesFitInMemory(config, args, 1 * kGiB).ok());
  config.mutable_validation()->set_enable(true);
  config.mutable_validation()->set_seq_len(1 << 30);
  EXPECT_TRUE(absl::StartsWith(CheckSequencesFitInMemory(config, args, 64 * kGiB).message(),
                               "[validation] seq_len = 1073741824 does not fit in memory"));
  config.mutable_validation()->set_enable(false);
  EXPECT_TRUE(CheckSequencesFitInMemory(config, args, 64 * kGiB).ok());
  EXPECT_GT(UsableHostMemoryBytes(), 0);
}

// Caps this process's address space at what it maps plus 256 MiB, then exits with 0 if
// UsableHostMemoryBytes leaves at most those 256 MiB.
[[noreturn]] void ExitOnWhatACapLeaves() {
  constexpr int64_t kMiB = int64_t{1} << 20;
  std::ifstream statm("/proc/self/statm");
  int64_t mapped_pages = 0;
  statm >> mapped_pages;
  const int64_t mapped = mapped_pages * sysconf(_SC_PAGESIZE);
  rlimit limit;
  limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(mapped + 256 * kMiB);
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::_Exit(2);
  const int64_t left = UsableHostMemoryBytes();
  std::cerr << "mapped " << mapped << " bytes, left " << left << std::endl;
  std::_Exit(left > 0 && left <= 256 * kMiB ? 0 : 1);
}

// Under ulimit -v the address space already mapped (libraries, heap) is not left to allocate.
TEST(UsableHostMemoryBytesTest, AnAddressSpaceLimitLeavesOnlyWhatIsNotMapped) {
  EXPECT_EXIT(ExitOnWhatACapLeaves(), ::testing::ExitedWithCode(0), "");
}

TEST(RemoveInterruptedWritesTest, RemovesOnlyTheTemporariesOfTheRunsOwnFiles) {
  const std::string dump = TestDir("interrupted_writes");
  ASSERT_TRUE(MakeDirectories(dump + "/rank_1").ok());
  ASSERT_TRUE(MakeDirectories(dump + "/checkpoint").ok());
  const std::vector<std::string> left = {
      "config.toml.tmp.123",  "metrics.jsonl.tmp.45",       "metrics.jsonl.tmp.46",
      "rollouts.jsonl.tmp.7", "rollouts_rank3.jsonl.tmp.8", "rank_1/metrics.jsonl.tmp.9"};
  const std::vector<std::string> kept = {"config.toml",
                                         "metrics.jsonl",
                                         "notes.txt.tmp.5",
                                         "config.toml.tmp.12a",
                                         "metrics.jsonl.tmp.",
                                         "rank_1/config.toml.tmp.3",
                                         "checkpoint/.restart-r.json.tmp.4"};
  for (const std::string& name : left) std::ofstream(dump + "/" + name) << "x";
  for (const std::string& name : kept) std::ofstream(dump + "/" + name) << "x";
  RemoveInterruptedWrites(dump);
  for (const std::string& name : left) EXPECT_FALSE(PathExists(dump + "/" + name)) << name;
  for (const std::string& name : kept) EXPECT_TRUE(PathExists(dump + "/" + name)) << name;
  RemoveInterruptedWrites(dump + "/missing");  // a new folder: nothing to do
}

TEST(BuildTokenizerTest, AMissingTokenizerNamesTheKeyItCameFrom) {
  JobConfig config = DefaultJobConfig();
  config.mutable_model()->set_hf_assets_path("/nonexistent/assets");
  EXPECT_EQ(BuildTokenizer(config).status().message(),
            "[model] hf_assets_path: /nonexistent/assets: no such tokenizer file or directory");
  config.mutable_model()->set_tokenizer_path("/nonexistent");
  EXPECT_EQ(BuildTokenizer(config).status().message(),
            "[model] tokenizer_path: /nonexistent: no such tokenizer file or directory");
}

// A folder holding both an HF and a Meta checkpoint (Llama's original/ copied beside its HF files)
// is read as the one initial_load_in_hf names, not refused as the other format; a folder holding
// one is still refused under the other setting.
TEST(InitialLoadPathTest, AFolderWithHfAndMetaIsReadAsTheOneInitialLoadInHfNames) {
  const std::string both = TestDir("hf_and_meta"), hf = TestDir("hf_only");
  ASSERT_TRUE(MakeDirectories(both).ok());
  ASSERT_TRUE(MakeDirectories(hf).ok());
  for (const std::string& file : {both + "/config.json", both + "/params.json",
                                  both + "/consolidated.00.pth", hf + "/config.json"}) {
    std::ofstream(file) << "{}";
  }
  JobConfig config = DefaultJobConfig();
  config.mutable_checkpoint()->set_initial_load_path(both);
  for (const bool in_hf : {false, true}) {
    config.mutable_checkpoint()->set_initial_load_in_hf(in_hf);
    const absl::StatusOr<std::string> path = InitialLoadPath(config);
    ASSERT_TRUE(path.ok()) << path.status();
    EXPECT_EQ(*path, both);
  }
  config.mutable_checkpoint()->set_initial_load_path(hf);
  config.mutable_checkpoint()->set_initial_load_in_hf(false);
  EXPECT_EQ(InitialLoadPath(config).status().message(),
            "[checkpoint] initial_load_path: " + hf +
                " holds a Hugging Face checkpoint, but [checkpoint] initial_load_in_hf = false "
                "reads titan or Meta checkpoints: set it to true");
}

// torchtitan loads split="train" to train and split="validation" to validate: a folder split so
// by its names is read by split, and one without the wanted split is refused.
TEST(BuildDataTest, AFolderSplitByNameIsReadBySplit) {
  const std::string dir = TestDir("split_folder");
  std::filesystem::create_directories(dir);
  for (const std::string name : {"train-00000-of-00001.jsonl", "test-00000-of-00001.jsonl"}) {
    std::ofstream(dir + "/" + name) << "{\"text\": \"a\"}\n";
  }
  JobConfig config = DefaultJobConfig();
  config.mutable_training()->set_dataset_path(dir);
  config.mutable_validation()->set_dataset_path(dir);
  config.mutable_training()->set_seq_len(4);  // the read-ahead fills its batches at once
  config.mutable_training()->set_local_batch_size(1);
  std::unique_ptr<Tokenizer> tokenizer = BuildTokenizer(config).value();
  absl::StatusOr<std::unique_ptr<TextDataLoader>> train =
      BuildTrainData(config, tokenizer.get(), RunSetup());
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_THAT((*train)->dataset().files(),
              testing::ElementsAre(dir + "/train-00000-of-00001.jsonl"));
  EXPECT_THAT(
      std::string(BuildValidationData(config, tokenizer.get(), RunSetup()).status().message()),
      testing::StartsWith(absl::StrCat(dir,
                                       ": its file and folder names make the splits "
                                       "train (1 file), test (1 file)")));

  std::ofstream(dir + "/dev-00000-of-00001.jsonl") << "{\"text\": \"b\"}\n";
  absl::StatusOr<std::unique_ptr<TextDataLoader>> validation =
      BuildValidationData(config, tokenizer.get(), RunSetup());
  ASSERT_TRUE(validation.ok()) << validation.status();
  EXPECT_THAT((*validation)->dataset().files(),
              testing::ElementsAre(dir + "/dev-00000-of-00001.jsonl"));
}

// The ids ResolveModel reads: a vocabulary of `vocab_size`, no BOS.
class SizedTokenizer : public Tokenizer {
 public:
  explicit SizedTokenizer(int64_t vocab_size) : vocab_size_(vocab_size) {}
  std::vector<int32_t> Encode(absl::string_view, bool, bool, SpecialTokenText) const override {
    return {};
  }
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t>, UnknownIds) const override {
    return "";
  }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  int32_t eos_id() const override { return 0; }
  int64_t vocab_size() const override { return vocab_size_; }

 private:
  int64_t vocab_size_;
};

// Qwen3 debugmodel's shape with a 64-id vocabulary (SizedTokenizer(64)'s).
TransformerArgs Qwen3Debug64() {
  TransformerArgs args = (*FindModel("qwen3"))->Flavor("debugmodel").value();
  args.vocab_size = 64;
  return args;
}

// A qwen3 debugmodel job whose [model] hf_assets_path, TestDir(`name`), holds a config.json
// describing `described`.
JobConfig JobWithAssetsConfig(const std::string& name, const ModelInfo& described) {
  const std::string assets = TestDir(name);
  std::filesystem::create_directories(assets);
  std::ofstream(assets + "/config.json") << HfConfig(described, "float32").dump();
  JobConfig config = DefaultJobConfig();
  config.mutable_model()->set_name("qwen3");
  config.mutable_model()->set_flavor("debugmodel");
  config.mutable_model()->set_hf_assets_path(assets);
  return config;
}

// Qwen3 debugmodel's one-line description says nothing of RoPE's theta: the refusal names it.
TEST(ResolveModelTest, AnAssetsConfigThatDiffersFromTheFlavorNamesTheFields) {
  TransformerArgs args = Qwen3Debug64();
  args.rope.theta = 10000;
  const JobConfig config = JobWithAssetsConfig("assets", DescribeModel(**FindModel("qwen3"), args));
  EXPECT_THAT(std::string(ResolveModel(config, SizedTokenizer(64), "").status().message()),
              ::testing::HasSubstr(", vocab 64, tied, qk-norm (rope_theta 10000 vs 1000000); use "
                                   "flavor = \"from_checkpoint\""));
}

// A model-only titan step, TestDir(`name`)/step-1, whose manifest describes `args` (its one tensor
// matches nothing: the architecture is checked before any tensor).
std::string SavedModelStep(const std::string& name, const TransformerArgs& args) {
  CheckpointState state;
  state.model.emplace_back("tok_embeddings.weight", at::zeros({2}));
  state.extra["model"] = ModelInfoToJson(DescribeModel(**FindModel("qwen3"), args));
  const std::string root = TestDir(name);
  EXPECT_TRUE(CheckpointManager(root, 0).Save(1, state, /*model_only=*/true).ok());
  return root + "/step-1";
}

TEST(ResolveModelTest, AnInitialLoadOfAnotherArchitectureIsRefusedNamingTheFields) {
  // Loading compares shapes, which rope_theta leaves alike: the saved model entry tells.
  TransformerArgs args = Qwen3Debug64();
  JobConfig config = DefaultJobConfig();
  config.mutable_model()->set_name("qwen3");
  config.mutable_model()->set_flavor("debugmodel");
  for (const double theta : {1e6, 1e4}) {
    args.rope.theta = theta;
    const std::string step = SavedModelStep(absl::StrCat("initial_", theta), args);
    config.mutable_checkpoint()->set_initial_load_path(step);
    const absl::StatusOr<ModelInfo> info = ResolveModel(config, SizedTokenizer(64), "");
    if (theta == 1e6) {
      EXPECT_TRUE(info.ok()) << info.status();
    } else {
      EXPECT_THAT(std::string(info.status().message()),
                  ::testing::HasSubstr("[checkpoint] initial_load_path: " + step + " holds "));
      EXPECT_THAT(std::string(info.status().message()),
                  ::testing::HasSubstr("(rope_theta 10000 vs 1000000); use flavor = "
                                       "\"from_checkpoint\""));
    }
  }
}

// from_checkpoint takes the shape from hf_assets_path; an initial load of another model (its
// weights' shapes alike) must not run under that shape's RoPE.
TEST(ResolveModelTest, FromCheckpointRefusesAnInitialLoadOfAnotherArchitecture) {
  JobConfig config =
      JobWithAssetsConfig("from_assets", DescribeModel(**FindModel("qwen3"), Qwen3Debug64()));
  config.mutable_model()->set_flavor("from_checkpoint");
  for (const double theta : {1e6, 1e4}) {
    TransformerArgs args = Qwen3Debug64();
    args.rope.theta = theta;
    const std::string step = SavedModelStep(absl::StrCat("from_initial_", theta), args);
    config.mutable_checkpoint()->set_initial_load_path(step);
    const absl::StatusOr<ModelInfo> info = ResolveModel(config, SizedTokenizer(64), "");
    if (theta == 1e6) {
      EXPECT_TRUE(info.ok()) << info.status();
      continue;
    }
    EXPECT_THAT(std::string(info.status().message()),
                ::testing::HasSubstr("[checkpoint] initial_load_path: " + step + " holds "));
    EXPECT_THAT(std::string(info.status().message()),
                ::testing::HasSubstr("comes from [model] hf_assets_path: " +
                                     config.model().hf_assets_path()));
    EXPECT_THAT(std::string(info.status().message()),
                ::testing::HasSubstr("(rope_theta 10000 vs 1000000); point both at one model"));
  }
}

// What shapes do not say (special ids, generation config) a named flavor takes from its HF folder,
// as a "from_checkpoint" model does: exports keep them, and titan_rl stops at every eos id.
TEST(ResolveModelTest, ANamedFlavorTakesItsHfFoldersIdsAndGenerationConfig) {
  ModelInfo saved = DescribeModel(**FindModel("qwen3"), Qwen3Debug64(), /*bos_token_id=*/3,
                                  nlohmann::json::array({4, 5}));
  saved.pad_token_id = 6;
  const JobConfig config = JobWithAssetsConfig("assets_ids", saved);
  const std::string assets = config.model().hf_assets_path();
  const std::string generation = R"({"eos_token_id": [4, 5, 7], "temperature": 0.6})";
  std::ofstream(assets + "/generation_config.json") << generation;
  absl::StatusOr<ModelInfo> info = ResolveModel(config, SizedTokenizer(64), "");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->bos_token_id, 3);
  EXPECT_EQ(info->eos_token_id, nlohmann::json::array({4, 5}));
  EXPECT_EQ(info->pad_token_id, 6);
  EXPECT_EQ(info->hf_generation_config, nlohmann::json::parse(generation));
  // A tokenizer's folder (no config.json) lends its generation config alone.
  std::filesystem::rename(assets + "/config.json", assets + "/config.json.away");
  info = ResolveModel(config, SizedTokenizer(64), "");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->eos_token_id, 0);  // the tokenizer's
  EXPECT_TRUE(info->pad_token_id.is_null());
  EXPECT_EQ(info->hf_generation_config, nlohmann::json::parse(generation));
}

TEST(ResolveModelTest, AnAssetsConfigOfAnotherVocabIsRefused) {
  TransformerArgs args = Qwen3Debug64();
  args.vocab_size = 96;
  const JobConfig config =
      JobWithAssetsConfig("assets_vocab", DescribeModel(**FindModel("qwen3"), args));
  const std::string assets = config.model().hf_assets_path();
  EXPECT_THAT(std::string(ResolveModel(config, SizedTokenizer(64), "").status().message()),
              ::testing::HasSubstr("[model] hf_assets_path: " + assets + " holds dim"));
  EXPECT_THAT(std::string(ResolveModel(config, SizedTokenizer(64), "").status().message()),
              ::testing::HasSubstr("(vocab_size 96 vs 64); use flavor"));
}

}  // namespace
}  // namespace titan
