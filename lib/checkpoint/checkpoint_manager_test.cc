#include "lib/checkpoint/checkpoint_manager.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/directory.h"
#include "lib/checkpoint/rng_state.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A fresh directory per test.
std::string TestRoot() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = absl::StrCat(
      tmp ? tmp : "/tmp", "/", testing::UnitTest::GetInstance()->current_test_info()->name());
  EXPECT_TRUE(RemoveTree(root).ok());
  return root;
}

bool SameBits(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
         a.contiguous().view(at::kByte).equal(b.contiguous().view(at::kByte));
}

void ExpectSameTensors(const NamedTensors& actual, const NamedTensors& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].first, expected[i].first);
    EXPECT_TRUE(SameBits(actual[i].second.reshape(-1), expected[i].second.reshape(-1)))
        << actual[i].first;
  }
}

// A small model and Adam-like optimizer state whose values depend on `seed`.
CheckpointState MakeState(int seed, int64_t width = 8) {
  at::manual_seed(seed);
  CheckpointState state;
  state.model = {{"tok_embeddings.weight", at::randn({16, width}).to(at::kBFloat16)},
                 {"layers.0.attention.wq.weight", at::randn({width, width})},
                 {"norm.weight", at::ones({width})},
                 {"scale", at::tensor(0.5)}};  // 0-dim
  state.optimizer = {{"exp_avg.layers.0.attention.wq.weight", at::randn({width, width})},
                     {"exp_avg_sq.layers.0.attention.wq.weight", at::rand({width, width})},
                     {"step.layers.0.attention.wq.weight", at::tensor(int64_t{seed})},
                     {"empty", at::zeros({0, 3})}};
  state.extra = {{"train_state", {{"step", seed}}},
                 {"lr_scheduler", {{"last_epoch", seed}, {"base_lrs", {3e-4}}}},
                 {"dataloader", {{"cursor", 123}}}};
  return state;
}

TEST(CheckpointManagerTest, SavesListsAndLoadsSteps) {
  CheckpointManager manager(TestRoot(), /*keep_latest_k=*/0);
  const CheckpointState ten = MakeState(10);
  ASSERT_TRUE(manager.Save(10, ten, /*model_only=*/false).ok());
  ASSERT_TRUE(manager.Save(20, MakeState(20), /*model_only=*/false).ok());

  absl::StatusOr<std::vector<int64_t>> steps = manager.ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_THAT(*steps, ElementsAre(10, 20));
  EXPECT_EQ(*manager.LatestStep(), 20);
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "manifest.json"}) {
    EXPECT_TRUE(PathExists(manager.StepDirectory(10) + "/" + file)) << file;
  }

  absl::StatusOr<CheckpointState> loaded = manager.Load(10);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameTensors(loaded->model, ten.model);
  ExpectSameTensors(loaded->optimizer, ten.optimizer);
  EXPECT_EQ(loaded->extra, ten.extra);
}

TEST(CheckpointManagerTest, EmptyRootHasNoSteps) {
  CheckpointManager manager(TestRoot() + "/never_created", 0);
  absl::StatusOr<std::vector<int64_t>> steps = manager.ListSteps();
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_THAT(*steps, IsEmpty());
  EXPECT_EQ(manager.LatestStep().status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(manager.Load(3).status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointManagerTest, KeepLatestKDeletesOlderSteps) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, /*keep_latest_k=*/2);
  for (int step = 1; step <= 5; ++step)
    ASSERT_TRUE(manager.Save(step, MakeState(step), false).ok());
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(4, 5));
  EXPECT_EQ(ListDirectory(root)->size(), 2u);

  CheckpointManager keep_all(root, /*keep_latest_k=*/0);
  ASSERT_TRUE(keep_all.Save(6, MakeState(6), false).ok());
  EXPECT_THAT(*keep_all.ListSteps(), ElementsAre(4, 5, 6));
}

TEST(CheckpointManagerTest, ModelOnlyLeavesOutTheOptimizer) {
  CheckpointManager manager(TestRoot(), 0);
  const CheckpointState state = MakeState(3);
  ASSERT_TRUE(manager.Save(3, state, /*model_only=*/true).ok());
  EXPECT_FALSE(PathExists(manager.StepDirectory(3) + "/optimizer.safetensors"));

  absl::StatusOr<CheckpointState> loaded = manager.Load(3);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameTensors(loaded->model, state.model);
  EXPECT_THAT(loaded->optimizer, IsEmpty());

  const CheckpointState fresh = MakeState(99);
  absl::Status status = manager.LoadInto(3, fresh.model, &fresh.optimizer, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("model-only"));
  ASSERT_TRUE(manager.LoadInto(3, fresh.model, nullptr, nullptr).ok());
  ExpectSameTensors(fresh.model, state.model);
}

TEST(CheckpointManagerTest, SavingAnExistingStepReplacesIt) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, 0);
  ASSERT_TRUE(manager.Save(3, MakeState(1), false).ok());
  const CheckpointState second = MakeState(2);
  ASSERT_TRUE(manager.Save(3, second, false).ok());
  absl::StatusOr<CheckpointState> loaded = manager.Load(3);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameTensors(loaded->model, second.model);
  ExpectSameTensors(loaded->optimizer, second.optimizer);
  EXPECT_THAT(*ListDirectory(root), ElementsAre("step-3"));
}

TEST(CheckpointManagerTest, StaleTemporaryIsIgnoredThenCleaned) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, 0);
  const CheckpointState good = MakeState(5);
  ASSERT_TRUE(manager.Save(5, good, false).ok());
  // What a crash mid-save leaves: a temporary with a half-written file and no manifest.
  const std::string stale = root + "/step-7.tmp-12345";
  ASSERT_TRUE(MakeDirectories(stale).ok());
  std::ofstream(stale + "/model.safetensors") << "half";
  ASSERT_TRUE(MakeDirectories(root + "/step-007").ok());  // Not a name Save writes.

  EXPECT_THAT(*manager.ListSteps(), ElementsAre(5));
  EXPECT_EQ(*manager.LatestStep(), 5);
  absl::StatusOr<CheckpointState> loaded = manager.Load(5);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameTensors(loaded->model, good.model);

  ASSERT_TRUE(manager.Save(6, MakeState(6), false).ok());
  EXPECT_FALSE(PathExists(stale));
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(5, 6));
}

TEST(CheckpointManagerTest, KilledSavesNeverLeaveAHalfStep) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, 0);
  const CheckpointState first = MakeState(1);
  ASSERT_TRUE(manager.Save(1, first, false).ok());
  const CheckpointState big = MakeState(2, /*width=*/512);  // ~3 MB a step: kills land mid-write.
  for (int delay_ms : {1, 3, 7, 15, 30}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Saves new steps and replaces existing ones until killed.
      for (int i = 0;; ++i) {
        if (!manager.Save(2 + i % 3, big, false).ok()) ::_exit(1);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(child, SIGKILL);
    int wait_status = 0;
    ASSERT_EQ(::waitpid(child, &wait_status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(wait_status)) << "the saving child failed before it was killed";

    absl::StatusOr<std::vector<int64_t>> steps = manager.ListSteps();
    ASSERT_TRUE(steps.ok()) << steps.status();
    ASSERT_FALSE(steps->empty());
    EXPECT_EQ(steps->front(), 1);
    for (int64_t step : *steps) {
      absl::StatusOr<CheckpointState> loaded = manager.Load(step);
      ASSERT_TRUE(loaded.ok()) << "after a kill at " << delay_ms << " ms: " << loaded.status();
      ExpectSameTensors(loaded->model, step == 1 ? first.model : big.model);
    }
  }
  ASSERT_TRUE(manager.Save(9, first, false).ok());
  absl::StatusOr<std::vector<std::string>> names = ListDirectory(root);
  ASSERT_TRUE(names.ok()) << names.status();
  for (const std::string& name : *names) {
    EXPECT_THAT(name, testing::Not(HasSubstr(".tmp")));
  }
}

TEST(CheckpointManagerTest, ChecksumMismatchIsDetected) {
  CheckpointManager manager(TestRoot(), 0);
  ASSERT_TRUE(manager.Save(1, MakeState(1), false).ok());

  // one bit of the last byte, which belongs to a tensor, without changing the file's size.
  const std::string path = manager.StepDirectory(1) + "/optimizer.safetensors";
  std::string bytes = *ReadFile(path);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x01);
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());

  absl::Status status = manager.Load(1).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_THAT(status.message(), HasSubstr("does not match the manifest"));
  EXPECT_TRUE(manager.Load(1, /*verify_checksums=*/false).ok());
}

TEST(CheckpointManagerTest, ManifestProblemsNameTheFileAndTensor) {
  CheckpointManager manager(TestRoot(), 0);
  ASSERT_TRUE(manager.Save(1, MakeState(1), false).ok());
  const std::string manifest_path = manager.StepDirectory(1) + "/manifest.json";
  const nlohmann::json manifest = nlohmann::json::parse(*ReadFile(manifest_path));
  auto load_with = [&](const nlohmann::json& edited) {
    EXPECT_TRUE(WriteFileAtomically(manifest_path, edited.dump()).ok());
    return manager.Load(1).status();
  };

  nlohmann::json edited = manifest;
  edited["format_version"] = 2;
  EXPECT_THAT(load_with(edited).message(), HasSubstr("format_version 2, expected 1"));

  edited = manifest;
  edited["tensors"][1]["shape"] = {1, 2};
  absl::Status status = load_with(edited);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("model.safetensors: tensor '"));
  EXPECT_THAT(status.message(), HasSubstr("manifest says"));

  edited = manifest;
  edited["tensors"][0]["name"] = "renamed";
  EXPECT_THAT(load_with(edited).message(),
              HasSubstr("tensor 'renamed': listed in the manifest, missing"));

  edited = manifest;
  edited["tensors"].erase(0);
  EXPECT_THAT(load_with(edited).message(), HasSubstr("is not listed in the manifest"));

  edited = manifest;
  edited["tensors"][0].erase("crc32");
  EXPECT_THAT(load_with(edited).message(), HasSubstr("tensors[0]"));

  EXPECT_THAT(load_with(nlohmann::json::array()).message(), HasSubstr("not a valid JSON object"));
  ASSERT_TRUE(WriteFileAtomically(manifest_path, "{\"format_version\": 1,").ok());
  EXPECT_THAT(manager.Load(1).status().message(), HasSubstr(manifest_path));

  ASSERT_EQ(::unlink(manifest_path.c_str()), 0);
  EXPECT_THAT(manager.Load(1).status().message(), HasSubstr(manifest_path));
}

TEST(CheckpointManagerTest, LoadIntoCopiesInPlace) {
  CheckpointManager manager(TestRoot(), 0);
  const CheckpointState saved = MakeState(4);
  ASSERT_TRUE(manager.Save(4, saved, false).ok());

  const CheckpointState target = MakeState(5);
  // Same storage is updated: keep a handle to the original tensor object.
  const at::Tensor wq = target.model[1].second;
  nlohmann::json extra;
  ASSERT_TRUE(manager.LoadInto(4, target.model, &target.optimizer, &extra).ok());
  ExpectSameTensors(target.model, saved.model);
  ExpectSameTensors(target.optimizer, saved.optimizer);
  EXPECT_TRUE(SameBits(wq, saved.model[1].second));
  EXPECT_EQ(extra, saved.extra);

  // A float32 destination for a bf16 tensor converts, as load_state_dict's copy_ does.
  NamedTensors widened = MakeState(6).model;
  widened[0].second = widened[0].second.to(at::kFloat);
  ASSERT_TRUE(manager.LoadInto(4, widened, nullptr, nullptr).ok());
  EXPECT_TRUE(widened[0].second.equal(saved.model[0].second.to(at::kFloat)));
}

TEST(CheckpointManagerTest, LoadIntoListsMismatchedKeysAndShapesBeforeWriting) {
  CheckpointManager manager(TestRoot(), 0);
  ASSERT_TRUE(manager.Save(4, MakeState(4), false).ok());

  NamedTensors model = MakeState(5).model;
  const at::Tensor untouched = model[0].second.clone();
  model[1].first = "layers.0.attention.wk.weight";  // Missing from the checkpoint.
  model[2].second = at::ones({3});                  // Wrong shape.
  absl::Status status = manager.LoadInto(4, model, nullptr, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.safetensors"));
  EXPECT_THAT(status.message(), HasSubstr("missing keys: layers.0.attention.wk.weight"));
  EXPECT_THAT(status.message(), HasSubstr("unexpected keys: layers.0.attention.wq.weight"));
  EXPECT_THAT(status.message(), HasSubstr("norm.weight: checkpoint [8], destination [3]"));
  EXPECT_TRUE(SameBits(model[0].second, untouched));
}

TEST(CheckpointManagerTest, RngStateSurvivesSaveAndLoad) {
  CheckpointManager manager(TestRoot(), 0);
  at::manual_seed(42);
  CheckpointState state = MakeState(1);
  state.extra["rng"] = CaptureRngState();
  ASSERT_TRUE(manager.Save(1, state, true).ok());
  const at::Tensor expected = at::randn({32});

  at::manual_seed(0);
  absl::StatusOr<CheckpointState> loaded = manager.Load(1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(RestoreRngState(loaded->extra["rng"]).ok());
  EXPECT_TRUE(at::randn({32}).equal(expected));
}

TEST(CheckpointManagerTest, RejectsBadArguments) {
  CheckpointManager manager(TestRoot(), 0);
  CheckpointState state = MakeState(1);
  EXPECT_EQ(manager.Save(-1, state, false).code(), absl::StatusCode::kInvalidArgument);
  state.extra = nlohmann::json::array();
  EXPECT_THAT(manager.Save(1, state, false).message(),
              HasSubstr("extra state must be a JSON object"));
  state = MakeState(1);
  state.model.push_back(state.model[0]);
  EXPECT_THAT(manager.Save(1, state, false).message(), HasSubstr("duplicate name"));
  EXPECT_THAT(*manager.ListSteps(), IsEmpty());
}

}  // namespace
}  // namespace titan
