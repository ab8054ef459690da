#include "lib/train/trainer.h"

#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "lib/config/job_config.h"
#include "lib/parallel/distributed_runtime.h"
#include "lib/train/step_host_reads.h"
#include "lib/train/train_checkpoint.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

// A trainer of a small debug model on the bundled tokenizer and corpus, initialised from seed 0.
std::unique_ptr<Trainer> MakeTrainer(const std::string& name, JobConfig& config,
                                     const std::vector<std::string>& overrides = {}) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::vector<std::string> flags = {
      absl::StrCat("--job.dump_folder=", tmp != nullptr ? tmp : "/tmp", "/", name),
      "--training.seed=0", "--training.max_norm=1e9", "--checkpoint.enable=false",
      "--metrics.enable_tensorboard=false", "--validation.enable=false"};
  flags.insert(flags.end(), overrides.begin(), overrides.end());
  absl::StatusOr<JobConfig> parsed = ParseJobConfig("configs/llama3_debugmodel.toml", flags);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  config = *parsed;
  // The trainer keeps a reference to its runtime.
  static const DistributedRuntime* runtime =
      new DistributedRuntime(DistributedRuntime::SingleProcess());
  auto trainer = std::make_unique<Trainer>(config, *runtime);
  absl::Status status = trainer->Init();
  EXPECT_TRUE(status.ok()) << status;
  return trainer;
}

std::string TempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// Init's status for the job MakeTrainer builds, in a fresh dump folder.
absl::Status InitStatus(const std::string& name, const std::vector<std::string>& overrides) {
  EXPECT_TRUE(RemoveTree(TempDir() + "/" + name).ok());
  std::vector<std::string> flags = {absl::StrCat("--job.dump_folder=", TempDir(), "/", name)};
  flags.insert(flags.end(), overrides.begin(), overrides.end());
  absl::StatusOr<JobConfig> config = ParseJobConfig("configs/llama3_debugmodel.toml", flags);
  if (!config.ok()) return config.status();
  static const DistributedRuntime* runtime =
      new DistributedRuntime(DistributedRuntime::SingleProcess());
  return Trainer(*config, *runtime).Init();
}

std::vector<at::Tensor> Gradients(Trainer& trainer) {
  std::vector<at::Tensor> grads;
  for (const ParamRef& p : trainer.model().NamedParameters()) grads.push_back(p.tensor->grad());
  return grads;
}

// max |a - b| / max |a| over every parameter.
double RelativeDiff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() /
                                a[i].abs().max().item<double>());
  }
  return worst;
}

Batch RandomBatch(int64_t rows, int64_t vocab, int seed) {
  at::manual_seed(seed);
  Batch batch;
  batch.tokens = at::randint(vocab, {rows, 16}, at::kLong);
  batch.labels = at::randint(vocab, {rows, 16}, at::kLong);
  return batch;
}

Batch Rows(const Batch& batch, int64_t begin, int64_t end) {
  return {batch.tokens.slice(0, begin, end), batch.labels.slice(0, begin, end)};
}

// fp32; the batches differ in shape, so kernels may sum in another order: 1e-6 relative.
constexpr double kTolerance = 1e-6;

TEST(TrainerTest, MaskedRowsGiveTheGradientOfTheUnmaskedSubBatch) {
  JobConfig config;
  auto masked_run = MakeTrainer("masked", config);
  const int64_t vocab = masked_run->model_info().args.vocab_size;
  Batch batch = RandomBatch(4, vocab, 7);
  Batch masked = batch;
  masked.labels = batch.labels.clone();
  masked.labels.slice(0, 2, 4).fill_(kIgnoreIndex);  // half the labels
  absl::StatusOr<StepResult> with_mask = masked_run->TrainStep({masked}, /*labels_masked=*/true);
  ASSERT_TRUE(with_mask.ok()) << with_mask.status();

  auto sub_run = MakeTrainer("sub", config);
  absl::StatusOr<StepResult> sub = sub_run->TrainStep({Rows(batch, 0, 2)}, true);
  ASSERT_TRUE(sub.ok()) << sub.status();
  EXPECT_NEAR(with_mask->loss, sub->loss, 1e-6);
  EXPECT_LT(RelativeDiff(Gradients(*sub_run), Gradients(*masked_run)), kTolerance);
}

TEST(TrainerTest, MicrobatchesWithDifferentCountsGiveTheWholeBatchGradient) {
  JobConfig config;
  auto accumulated = MakeTrainer("accumulated", config);
  const int64_t vocab = accumulated->model_info().args.vocab_size;
  Batch batch = RandomBatch(4, vocab, 8);
  batch.labels.slice(0, 0, 2).slice(1, 4).fill_(kIgnoreIndex);  // rows 0-1: 8 of 32 count
  absl::StatusOr<StepResult> two =
      accumulated->TrainStep({Rows(batch, 0, 2), Rows(batch, 2, 4)}, /*labels_masked=*/true);
  ASSERT_TRUE(two.ok()) << two.status();

  auto whole = MakeTrainer("whole", config);
  absl::StatusOr<StepResult> one = whole->TrainStep({batch}, true);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_NEAR(two->loss, one->loss, 1e-6);
  EXPECT_LT(RelativeDiff(Gradients(*whole), Gradients(*accumulated)), kTolerance);
}

TEST(TrainerTest, UnloggedStepsReadNothingBackAndUpdateAlike) {
  JobConfig config;
  auto logged = MakeTrainer("logged", config);
  auto unlogged = MakeTrainer("unlogged", config);
  const Batch batch = RandomBatch(4, logged->model_info().args.vocab_size, 9);
  for (int step = 0; step < 2; ++step) {
    absl::StatusOr<StepResult> read = logged->TrainStep({batch}, false);
    absl::StatusOr<StepResult> unread = unlogged->TrainStep({batch}, false, /*read_metrics=*/false);
    ASSERT_TRUE(read.ok() && unread.ok());
    EXPECT_GT(read->loss, 0);
    EXPECT_GT(read->grad_norm, 0);
    EXPECT_EQ(unread->loss, 0);  // never read from the device
    EXPECT_EQ(unread->grad_norm, 0);
  }
  // The same kernels on the same batch: the weights after two steps agree bit for bit.
  const std::vector<ParamRef> a = logged->model().NamedParameters();
  const std::vector<ParamRef> b = unlogged->model().NamedParameters();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(at::equal(*a[i].tensor, *b[i].tensor)) << a[i].name;
  }
}

// A step that logs nothing never waits for the device (GPU speed: the host queues the next step's
// kernels while this one runs). Only the optimizer's step counters are read, once a parameter:
// foreach keeps them on the CPU whatever the device, as torch's; fused keeps them on the device,
// where ATen's CUDA kernel reads them (its CPU kernel reads them on the host, as here).
TEST(TrainerTest, UnloggedStepsReadNoTensorOnTheHost) {
  for (const char* implementation : {"foreach", "fused"}) {
    SCOPED_TRACE(implementation);
    JobConfig config;
    auto trainer = MakeTrainer(absl::StrCat("host_reads_", implementation), config,
                               {absl::StrCat("--optimizer.implementation=", implementation)});
    const Batch batch = RandomBatch(2, trainer->model_info().args.vocab_size, 10);
    ASSERT_TRUE(trainer->TrainStep({batch}, false, /*read_metrics=*/false).ok());  // makes state
    const StepHostReads unlogged = CountStepHostReads(*trainer, {batch}, /*read_metrics=*/false);
    ASSERT_TRUE(unlogged.result.ok()) << unlogged.result.status();
    EXPECT_EQ(unlogged.device_values, 0);
    EXPECT_EQ(unlogged.step_counters, static_cast<int>(trainer->params().size()));
    // The count sees reads: a logged step reads its loss and gradient norm.
    const StepHostReads logged = CountStepHostReads(*trainer, {batch}, /*read_metrics=*/true);
    ASSERT_TRUE(logged.result.ok()) << logged.result.status();
    EXPECT_EQ(logged.device_values, 2);
  }
}

TEST(TrainerTest, ConfigTomlIsWrittenOnlyByAJobThatStarts) {
  const std::string config_toml = TempDir() + "/config_toml/config.toml";
  const absl::Status refused =
      InitStatus("config_toml", {"--optimizer.param_groups=[{pattern = \"nomatch\", lr = 1e-4}]"});
  EXPECT_TRUE(absl::StrContains(refused.message(), "matches no parameter")) << refused;
  EXPECT_FALSE(std::filesystem::exists(config_toml));
  ASSERT_TRUE(InitStatus("config_toml", {"--validation.enable=false"}).ok());
  EXPECT_TRUE(std::filesystem::exists(config_toml));
}

TEST(TrainerTest, BadValidationDataStopsInit) {
  const std::string empty = TempDir() + "/empty_validation.jsonl";
  const std::string malformed = TempDir() + "/malformed_validation.jsonl";
  ASSERT_TRUE(WriteFileAtomically(empty, "").ok());
  ASSERT_TRUE(WriteFileAtomically(malformed, "{\"text\": \"a\"}\nnot json\n").ok());
  for (const std::string& path : {TempDir() + "/missing_validation.jsonl", empty, malformed}) {
    const absl::Status status =
        InitStatus("bad_validation", {"--validation.enable=true", "--checkpoint.enable=false",
                                      "--validation.dataset_path=" + path});
    EXPECT_FALSE(status.ok()) << path;
    EXPECT_TRUE(absl::StartsWith(status.message(), "[validation] dataset_path: ")) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), path)) << status;
  }
  EXPECT_TRUE(InitStatus("good_validation", {"--validation.enable=true"}).ok());
}

// The validation loss a one-step run logs with [validation] steps = `steps` on `path`, whose
// 4 documents are windows of 16 + 1 tokens each (15 tokens, and BOS and EOS), in batches of 2.
double ValidationLoss(const std::string& path, int64_t steps) {
  const std::string name = absl::StrCat("repeat_validation_", steps);
  EXPECT_TRUE(RemoveTree(TempDir() + "/" + name).ok());
  JobConfig config;
  auto trainer =
      MakeTrainer(name, config,
                  {"--training.steps=1", "--training.seq_len=16", "--training.local_batch_size=2",
                   "--optimizer.lr=0", "--validation.enable=true",
                   "--validation.dataset_path=" + path, "--validation.seq_len=16",
                   "--validation.local_batch_size=2", absl::StrCat("--validation.steps=", steps)});
  EXPECT_TRUE(trainer->Train().ok());
  absl::StatusOr<std::string> rows = ReadFile(TempDir() + "/" + name + "/metrics.jsonl");
  EXPECT_TRUE(rows.ok()) << rows.status();
  return nlohmann::json::parse(rows->substr(0, rows->find('\n')))["validation_loss"];
}

// As torchtitan's validator, a bounded evaluation repeats the data (it evaluated only the 2
// batches the set holds); steps = -1 reads it once.
TEST(TrainerTest, ValidationStepsPastTheSetRepeatIt) {
  const std::string path = TempDir() + "/four_windows.jsonl";
  ASSERT_TRUE(WriteFileAtomically(
                  path,
                  "{\"text\": \"quiet river stone morning quiet river stone morning quiet river "
                  "stone morning quiet river\"}\n"
                  "{\"text\": \"the green river ran on the green river ran on the\"}\n"
                  "{\"text\": \"stone cat in the park stone cat in the park\"}\n"
                  "{\"text\": \"one two three four five one two three four five one two three "
                  "four five\"}\n")
                  .ok());
  const double first = ValidationLoss(path, 1);  // batch 1: windows 1, 2
  const double both = ValidationLoss(path, 2);   // and batch 2: windows 3, 4
  EXPECT_NE(first, both);
  EXPECT_EQ(ValidationLoss(path, -1), both);
  // Batches 1, 2, 1, 2, 1, of 32 counted tokens each.
  const double second = 2 * both - first;
  EXPECT_NEAR(ValidationLoss(path, 5), (3 * first + 2 * second) / 5, 1e-5 * both);
}

TEST(TrainerTest, BlockCausalWithoutBosSeparatesDocumentsAfterEachEos) {
  // Qwen3's tokenizer files: the bundled vocabulary with Qwen's special tokens, no BOS.
  absl::StatusOr<std::string> bundled = ReadFile("assets/default_tokenizer/tokenizer.json");
  ASSERT_TRUE(bundled.ok()) << bundled.status();
  nlohmann::json spec = nlohmann::json::parse(*bundled);
  const int32_t first = static_cast<int32_t>(spec["model"]["vocab"].size());
  spec["added_tokens"] = nlohmann::json::array();
  for (const char* content : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    spec["added_tokens"].push_back({{"id", first + spec["added_tokens"].size()},
                                    {"content", content},
                                    {"special", true},
                                    {"single_word", false},
                                    {"lstrip", false},
                                    {"rstrip", false},
                                    {"normalized", false}});
  }
  const int32_t im_end = first + 2;
  const std::string dir = TempDir() + "/qwen3_tokenizer";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(WriteFileAtomically(dir + "/tokenizer.json", spec.dump()).ok());
  ASSERT_TRUE(WriteFileAtomically(dir + "/tokenizer_config.json",
                                  R"({"bos_token": null, "eos_token": "<|im_end|>"})")
                  .ok());
  const std::string corpus = TempDir() + "/three_documents.jsonl";
  ASSERT_TRUE(WriteFileAtomically(corpus,
                                  "{\"text\": \"The cat sat.\"}\n"
                                  "{\"text\": \"A dog ran far away.\"}\n"
                                  "{\"text\": \"Hi\"}\n")
                  .ok());
  JobConfig config;
  auto trainer =
      MakeTrainer("block_causal_no_bos", config,
                  {"--model.tokenizer_path=" + dir, "--model.attn_mask_type=block_causal",
                   "--training.dataset_path=" + corpus, "--training.seq_len=24",
                   "--training.local_batch_size=2"});
  absl::StatusOr<std::vector<Batch>> batches = trainer->NextMicrobatches();
  ASSERT_TRUE(batches.ok()) << batches.status();
  const at::Tensor tokens = batches->at(0).tokens;
  const at::Tensor documents = batches->at(0).documents;
  ASSERT_TRUE(documents.defined());
  // No BOS is added, not even <|endoftext|> (id `first`), which titan used to take for one.
  EXPECT_EQ(tokens.ge(first).logical_and(tokens.ne(im_end)).sum().item<int64_t>(), 0);
  const at::Tensor ends = tokens.eq(im_end).to(at::kLong);
  EXPECT_GE(ends.sum().item<int64_t>(), 4);  // several documents a row
  EXPECT_TRUE(at::equal(documents, ends.cumsum(1) - ends));
}

// The steps of the metrics.jsonl rows of a 20-step run ([metrics] log_freq = 10) sent SIGTERM at
// the end of step `signal_step`, and the loss of its last row.
std::vector<int64_t> LoggedStepsOfAStoppedRun(const std::string& name, int64_t signal_step,
                                              double& last_loss) {
  EXPECT_TRUE(RemoveTree(TempDir() + "/" + name).ok());
  JobConfig config;
  auto trainer = MakeTrainer(name, config,
                             {"--training.steps=20", "--metrics.log_freq=10",
                              "--training.seq_len=16", "--training.local_batch_size=2"});
  trainer->hooks().Add(StepPhase::kStepEnd, [signal_step](const StepEvent& event) {
    if (event.step == signal_step) std::raise(SIGTERM);  // Train's handler: stop after the step
    return absl::OkStatus();
  });
  const absl::Status status = trainer->Train();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(trainer->state().step, signal_step);
  absl::StatusOr<std::string> rows = ReadFile(TempDir() + "/" + name + "/metrics.jsonl");
  EXPECT_TRUE(rows.ok()) << rows.status();
  std::vector<int64_t> steps;
  for (absl::string_view row : absl::StrSplit(*rows, '\n', absl::SkipEmpty())) {
    const nlohmann::json parsed = nlohmann::json::parse(row);
    steps.push_back(parsed["step"]);
    last_loss = parsed["loss"];
  }
  return steps;
}

// A run stopped between log steps still logs the step it stopped after (with its loss), once.
TEST(TrainerTest, AStoppedRunLogsItsLastStepOnce) {
  double loss = 0;
  EXPECT_EQ(LoggedStepsOfAStoppedRun("stopped_unlogged", 13, loss),
            (std::vector<int64_t>{1, 10, 13}));
  EXPECT_GT(loss, 0);
  EXPECT_EQ(LoggedStepsOfAStoppedRun("stopped_logged", 10, loss), (std::vector<int64_t>{1, 10}));
}

// Resuming with train_state excluded restarts the step count; the schedule restarts with it
// rather than running ahead of the steps left. Also: an absolute checkpoint folder is used as is.
TEST(TrainerTest, OutOfDeviceMemoryStopsTheRunWithAStatus) {
  JobConfig config;
  auto trainer =
      MakeTrainer("out_of_memory", config, {"--training.steps=3", "--training.seq_len=16"});
  trainer->hooks().Add(StepPhase::kBeforeOptimizer, [](const StepEvent& event) -> absl::Status {
    // What the CUDA caching allocator throws; CPU allocation failures are plain c10::Errors.
    TORCH_CHECK_WITH(OutOfMemoryError, event.step != 2,
                     "CUDA out of memory. Tried to allocate 2 GiB");
    return absl::OkStatus();
  });
  const absl::Status status = trainer->Train();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_TRUE(
      absl::StrContains(status.message(), "step 2: out of device memory: CUDA out of memory"))
      << status;
  EXPECT_EQ(trainer->state().step, 1);
}

TEST(TrainerTest, ExcludedTrainStateRestartsTheSchedule) {
  const std::string folder = TempDir() + "/absolute_checkpoint";
  ASSERT_TRUE(RemoveTree(folder).ok());
  const std::vector<std::string> checkpointed = {
      "--checkpoint.enable=true", "--checkpoint.folder=" + folder, "--training.steps=3",
      "--training.seq_len=16", "--training.local_batch_size=2"};
  {
    JobConfig config;
    auto trainer = MakeTrainer("resume_schedule", config, checkpointed);
    ASSERT_TRUE(trainer->Train().ok());
  }
  ASSERT_TRUE(std::filesystem::exists(folder + "/step-3"));
  for (const char* excluded : {"dataloader", "train_state", "lr_scheduler"}) {
    SCOPED_TRACE(excluded);
    std::vector<std::string> flags = checkpointed;
    flags.push_back(absl::StrCat("--checkpoint.exclude_from_loading=", excluded));
    JobConfig config;
    auto trainer = MakeTrainer("resume_schedule", config, flags);
    const bool restarted = excluded == std::string("train_state");
    EXPECT_EQ(trainer->state().step, restarted ? 0 : 3);
    EXPECT_EQ(trainer->state().lr_step,
              restarted || excluded == std::string("lr_scheduler") ? 0 : 3);
  }
}

// A weight past float16's range would be exported as inf: the model-only final save refuses it,
// naming the tensor, and writes neither the step nor its Hugging Face export.
TEST(TrainerTest, ExportDtypeRefusesAWeightPastItsRange) {
  const std::string folder = TempDir() + "/float16_checkpoint";
  ASSERT_TRUE(RemoveTree(folder).ok());
  JobConfig config;
  auto trainer = MakeTrainer(
      "float16_export", config,
      {"--checkpoint.enable=true", "--checkpoint.folder=" + folder, "--training.steps=1",
       "--training.seq_len=16", "--training.local_batch_size=2", "--optimizer.lr=1e-9",
       "--optimizer.weight_decay=0", "--checkpoint.last_save_model_only=true",
       "--checkpoint.last_save_in_hf=true", "--checkpoint.export_dtype=float16"});
  bool found = false;
  for (const ParamRef& p : trainer->model().NamedParameters()) {
    if (p.name != "norm.weight") continue;
    c10::NoGradGuard no_grad;
    p.tensor->index_put_({0}, 1e5);
    found = true;
  }
  ASSERT_TRUE(found);
  const absl::Status trained = trainer->Train();
  EXPECT_TRUE(absl::StrContains(trained.message(),
                                "step 1: weight norm.weight (max |value| 100000) is past float16's "
                                "largest value 65504 and would be saved as inf"))
      << trained;
  EXPECT_TRUE(absl::StrContains(trained.message(), "export_dtype = \"bfloat16\" or \"float32\""))
      << trained;
  EXPECT_FALSE(std::filesystem::exists(folder + "/step-1"));
  EXPECT_FALSE(std::filesystem::exists(folder + "/step-1-hf"));
}

// A weight is refused where the saved type rounds it to inf, not past the type's largest value:
// float16 writes 65519 as 65504 and 65520 as inf; bfloat16 likewise at its largest plus half a
// step.
TEST(TrainerTest, ExportDtypeRefusesOnlyWeightsThatRoundToInf) {
  const DistributedRuntime runtime = DistributedRuntime::SingleProcess();
  const auto refused = [&runtime](float value, at::ScalarType type) {
    at::Tensor weight = at::full({2}, value);
    return !RefuseNonFiniteWeights({{"w", &weight}}, runtime, "step 1", type).ok();
  };
  EXPECT_FALSE(refused(65519.0f, at::kHalf));
  EXPECT_TRUE(refused(65520.0f, at::kHalf));
  const float bfloat16_largest = std::numeric_limits<c10::BFloat16>::max();
  const float bfloat16_midpoint = absl::bit_cast<float>(0x7F7F8000u);
  EXPECT_FALSE(refused(std::nextafter(bfloat16_midpoint, 0.0f), at::kBFloat16));
  EXPECT_GT(std::nextafter(bfloat16_midpoint, 0.0f), bfloat16_largest);
  EXPECT_TRUE(refused(bfloat16_midpoint, at::kBFloat16));
  EXPECT_FALSE(refused(1e38f, at::kFloat));
  EXPECT_TRUE(refused(std::numeric_limits<float>::infinity(), at::kFloat));
}

// A resumed step's manifest with a field of another JSON type: one line naming the manifest, the
// key and the type expected (nlohmann's type_error named neither the file nor the key).
TEST(TrainerTest, ManifestFieldOfAnotherTypeNamesTheFileKeyAndType) {
  const std::string folder = TempDir() + "/wrong_type_checkpoint";
  ASSERT_TRUE(RemoveTree(folder).ok());
  const std::vector<std::string> checkpointed = {
      "--checkpoint.enable=true", "--checkpoint.folder=" + folder, "--training.steps=1",
      "--training.seq_len=16", "--training.local_batch_size=2"};
  {
    JobConfig config;
    auto trainer = MakeTrainer("wrong_type", config, checkpointed);
    ASSERT_TRUE(trainer->Train().ok());
  }
  const std::string manifest_path = folder + "/step-1/manifest.json";
  absl::StatusOr<std::string> text = ReadFile(manifest_path);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json saved = nlohmann::json::parse(*text);
  const struct {
    const char* pointer;
    nlohmann::json value;
    const char* error;
  } cases[] = {
      {"/state/run_kind", 7, "state.run_kind: expected a string, got number"},
      {"/state/train_state/step", "1",
       "state.train_state.step: expected a non-negative 64-bit integer, got string"},
      {"/state/train_state/ntokens_seen", 1.5,
       "state.train_state.ntokens_seen: expected a non-negative 64-bit integer, got number"},
      {"/state/lr_scheduler", nlohmann::json::array(),
       "state.lr_scheduler: expected an object, got array"},
      {"/state/timeline_exclusions", "dataloader",
       "state.timeline_exclusions: expected a list of strings, got string"},
      {"/state/train_state/step", -1,
       "state.train_state.step: expected a non-negative 64-bit integer, got number"},
      {"/state/model", "x", "state.model: expected an object with \"args\", got string"},
  };
  for (const auto& [pointer, value, error] : cases) {
    SCOPED_TRACE(pointer);
    nlohmann::json manifest = saved;
    manifest[nlohmann::json::json_pointer(pointer)] = value;
    ASSERT_TRUE(WriteFileAtomically(manifest_path, manifest.dump()).ok());
    EXPECT_EQ(InitStatus("wrong_type", checkpointed).message(),
              absl::StrCat(manifest_path, ": ", error));
  }
}

}  // namespace
}  // namespace titan
