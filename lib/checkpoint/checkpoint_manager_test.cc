#include "lib/checkpoint/checkpoint_manager.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/checkpoint/rng_state.h"
#include "lib/checkpoint/test_dir.h"
#include "lib/util/directory.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

// A fresh directory per test.
std::string TestRoot() { return TestDir("root"); }

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

// A stop signal (a tool's SIGTERM) ends a save between tensors, leaving no step and no temporary.
TEST(CheckpointManagerTest, StopSignalEndsTheSaveAndLeavesNothing) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, /*keep_latest_k=*/0);
  const std::atomic<int> stop_signal{15};
  manager.set_stop_signal(&stop_signal);
  const absl::Status status = manager.Save(10, MakeState(10), /*model_only=*/false);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_EQ(status.message(), "stopped by signal 15");
  EXPECT_THAT(*ListDirectory(root), IsEmpty());
}

// A caller unwinding with an error stops rank 0's wait for a rank whose files never come (a dead
// rank) at once instead of at the commit timeout; the temporary stays for the next Save to remove.
TEST(CheckpointManagerTest, UnwindingEndsRankZerosWaitForADeadRank) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, 0, {0, 2, "dying-run", /*commit_timeout=*/absl::Seconds(60)});
  std::atomic<bool> give_up_waiting{false};
  std::thread unwinder([&] {
    // Once rank 0's own record is in, it waits for rank 1's, which never comes.
    const std::string record = root + "/step-10.tmp-dying-run/rank-00000.json";
    for (int i = 0; i < 3000 && !PathExists(record); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    give_up_waiting = true;
  });
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = manager.Save(10, MakeState(10), false, &give_up_waiting);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unwinder.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank(s) 1"));
  EXPECT_LT(seconds, 20) << "waited for the dead rank's files";
  EXPECT_THAT(*manager.ListSteps(), IsEmpty());
  EXPECT_THAT(manager.UncommittedStepFolders(), ElementsAre("step-10.tmp-dying-run"));

  CheckpointManager next_run(root, 0, {0, 1, "next-run"});
  ASSERT_TRUE(next_run.Save(10, MakeState(10), false).ok());
  EXPECT_THAT(*next_run.ListSteps(), ElementsAre(10));
  EXPECT_THAT(next_run.UncommittedStepFolders(), IsEmpty());
}

// With every rank's files in, an unwinding caller still commits: nothing is waited for.
TEST(CheckpointManagerTest, UnwindingStillCommitsWhatNeedsNoWait) {
  CheckpointManager manager(TestRoot(), 0);
  manager.set_write_duty_cycle(0.25);
  const std::atomic<bool> give_up_waiting{true};
  ASSERT_TRUE(manager.Save(10, MakeState(10), false, &give_up_waiting).ok());
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(10));
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

TEST(CheckpointManagerTest, EnforceKeepLatestTrimsStepsACrashBeforeTheCleanupLeft) {
  // What saves killed between their commit and their cleanup leave: more than k steps.
  const std::string root = TestRoot();
  CheckpointManager keep_all(root, /*keep_latest_k=*/0);
  for (int step : {0, 10, 20, 30}) ASSERT_TRUE(keep_all.Save(step, MakeState(step), false).ok());
  CheckpointManager other_rank(root, /*keep_latest_k=*/1, CheckpointRanks{1, 2, "run"});
  ASSERT_TRUE(other_rank.EnforceKeepLatest().ok());
  EXPECT_THAT(*keep_all.ListSteps(), ElementsAre(0, 10, 20, 30));  // rank 0 deletes
  CheckpointManager manager(root, /*keep_latest_k=*/2);
  manager.set_kept_step(0);
  // The step being loaded stays, though older than the k newest.
  ASSERT_TRUE(manager.EnforceKeepLatest(/*in_use=*/10).ok());
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(0, 10, 20, 30));
  ASSERT_TRUE(manager.EnforceKeepLatest(/*in_use=*/30).ok());
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(0, 20, 30));
  EXPECT_THAT(*ListDirectory(root), UnorderedElementsAre("step-0", "step-20", "step-30"));
}

TEST(CheckpointManagerTest, TheKeptStepIsNeitherDeletedNorCounted) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, /*keep_latest_k=*/2);
  manager.set_kept_step(0);
  for (int step = 0; step <= 4; ++step)
    ASSERT_TRUE(manager.Save(step, MakeState(step), step == 0).ok());
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(0, 3, 4));
}

TEST(CheckpointManagerTest, AStepThatCannotBeDeletedIsKeptAndTheSaveSucceeds) {
  // A run id long enough that step-10's deletion name (step-10.tmp-<id>-deleted) passes NAME_MAX
  // while step-2's and the save's own names do not: its rename fails, as for a step on a snapshot
  // or of another owner. The save succeeds, the step stays, and the other old steps still go.
  const std::string root = TestRoot();
  CheckpointManager keep_all(root, /*keep_latest_k=*/0);
  for (int step : {2, 10}) ASSERT_TRUE(keep_all.Save(step, MakeState(step), false).ok());
  CheckpointManager manager(root, /*keep_latest_k=*/1,
                            CheckpointRanks{0, 1, std::string(255 - 19, 'r')});
  ASSERT_TRUE(manager.Save(11, MakeState(11), false).ok());
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(10, 11));  // step 2 deleted, step 10 left
}

TEST(CheckpointManagerTest, StepsAfterARolledBackStepAreSetAsideNotDeleted) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, /*keep_latest_k=*/3, CheckpointRanks{0, 1, "run2"});
  for (int step = 2; step <= 6; step += 2)
    ASSERT_TRUE(manager.Save(step, MakeState(step), false).ok());
  ASSERT_TRUE(MakeDirectories(manager.HfExportDirectory(6)).ok());  // its last_save_in_hf export
  EXPECT_THAT(*manager.SetAsideStepsAfter(2, "test"), ElementsAre(4, 6));
  EXPECT_FALSE(PathExists(root + "/step-6-hf"));  // it goes with its step
  EXPECT_TRUE(IsDirectory(root + "/step-6-hf.abandoned-run2"));
  // The rolled-back run's saves are the newest now, and keep_latest_k counts only them.
  ASSERT_TRUE(manager.Save(3, MakeState(3), false).ok());
  EXPECT_EQ(*manager.LatestStep(), 3);
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(2, 3));
  ExpectSameTensors(manager.Load(3)->model, MakeState(3).model);
  EXPECT_TRUE(IsDirectory(root + "/step-6.abandoned-run2"));  // kept, under another name
  EXPECT_TRUE(IsDirectory(root + "/step-4.abandoned-run2"));
  EXPECT_THAT(*manager.SetAsideStepsAfter(3, "test"), ElementsAre());
}

// Run run1's steps 5 and 10 (and step 10's HF export), set aside by run2, which counts from step
// 0 again and is about to save step 5: run2's manager.
std::unique_ptr<CheckpointManager> RestartOverTwoSavedSteps(const std::string& root) {
  CheckpointManager earlier(root, /*keep_latest_k=*/0, CheckpointRanks{0, 1, "run1"});
  for (int step = 5; step <= 10; step += 5) {
    EXPECT_TRUE(earlier.Save(step, MakeState(step), false).ok());
  }
  EXPECT_TRUE(MakeDirectories(earlier.HfExportDirectory(10)).ok());
  auto restart =
      std::make_unique<CheckpointManager>(root, /*keep_latest_k=*/1, CheckpointRanks{0, 1, "run2"});
  EXPECT_THAT(*restart->SetAsideForRestart(5, "test"), ElementsAre(5, 10));
  return restart;
}

TEST(CheckpointManagerTest, ARestartThatDiesBeforeItsFirstSaveLeavesTheStepsItLoaded) {
  const std::string root = TestRoot();
  const std::unique_ptr<CheckpointManager> restart_manager = RestartOverTwoSavedSteps(root);
  CheckpointManager& restart = *restart_manager;
  EXPECT_THAT(*restart.ListSteps(), IsEmpty());
  // It died here, before its first save committed: the next run puts both steps back, with the
  // export.
  CheckpointManager rerun(root, /*keep_latest_k=*/1, CheckpointRanks{0, 1, "run3"});
  ASSERT_TRUE(rerun.RecoverInterruptedRuns().ok());
  EXPECT_THAT(*rerun.ListSteps(), ElementsAre(5, 10));
  ExpectSameTensors(rerun.Load(10)->model, MakeState(10).model);
  EXPECT_THAT(*ListDirectory(root), UnorderedElementsAre("step-5", "step-10", "step-10-hf"));
  ASSERT_TRUE(RemoveTree(root + "/step-10-hf").ok());

  // A restart whose first save committed keeps them aside.
  EXPECT_THAT(*rerun.SetAsideForRestart(5, "test"), ElementsAre(5, 10));
  ASSERT_TRUE(rerun.Save(5, MakeState(1), false).ok());
  ASSERT_TRUE(rerun.FinishRestart().ok());
  ASSERT_TRUE(rerun.RecoverInterruptedRuns().ok());
  EXPECT_THAT(*rerun.ListSteps(), ElementsAre(5));
  ExpectSameTensors(rerun.Load(5)->model, MakeState(1).model);
  EXPECT_THAT(*ListDirectory(root),
              UnorderedElementsAre("step-5", "step-5.abandoned-run3", "step-10.abandoned-run3"));

  // One that died between its commit and FinishRestart: its step goes, the loaded one comes back.
  CheckpointManager last(root, /*keep_latest_k=*/1, CheckpointRanks{0, 1, "run4"});
  EXPECT_THAT(*last.SetAsideForRestart(5, "test"), ElementsAre(5));
  ASSERT_TRUE(last.Save(5, MakeState(2), false).ok());
  ASSERT_TRUE(last.RecoverInterruptedRuns().ok());
  ExpectSameTensors(last.Load(5)->model, MakeState(1).model);
  EXPECT_TRUE(IsDirectory(root + "/step-5.unfinished-run4"));
  EXPECT_FALSE(PathExists(root + "/.restart-run4.json"));
}

// A restart killed while it wrote its journal (before its rename, so before any step was set
// aside) leaves the atomic write's temporary: the next run removes it, as a save's.
TEST(CheckpointManagerTest, AJournalTemporaryOfAKilledRestartIsRemoved) {
  const std::string root = TestRoot();
  CheckpointManager earlier(root, /*keep_latest_k=*/0, CheckpointRanks{0, 1, "run1"});
  ASSERT_TRUE(earlier.Save(5, MakeState(5), false).ok());
  std::ofstream(root + "/.restart-run2.json.tmp.4242") << "{\"run_id\": \"ru";
  std::ofstream(root + "/notes.txt.tmp.4242") << "not the run's";  // not a journal's: kept

  CheckpointManager rerun(root, /*keep_latest_k=*/0, CheckpointRanks{0, 1, "run3"});
  ASSERT_TRUE(rerun.RecoverInterruptedRuns().ok());
  EXPECT_THAT(*ListDirectory(root), UnorderedElementsAre("step-5", "notes.txt.tmp.4242"));
  ExpectSameTensors(rerun.Load(5)->model, MakeState(5).model);
}

// A restart's first save that fails (here past a file size limit, as on a full disk) puts the
// steps it set aside back at once: between runs the folder holds its last good step, for
// convert_checkpoint and checkpoint_inspect too.
TEST(CheckpointManagerTest, ARestartWhoseFirstSaveFailsPutsTheStepsItLoadedBack) {
  const std::string root = TestRoot();
  const std::unique_ptr<CheckpointManager> restart_manager = RestartOverTwoSavedSteps(root);
  CheckpointManager& restart = *restart_manager;

  struct rlimit limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &limit), 0);
  const struct rlimit small = {1000, limit.rlim_max};
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG, not a kill
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status saved = restart.Save(5, MakeState(1), false);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(saved.ok());
  EXPECT_THAT(saved.message(), HasSubstr("File too large"));

  ASSERT_TRUE(restart.DiscardFailedSave(5).ok());
  EXPECT_THAT(*restart.ListSteps(), ElementsAre(5, 10));
  EXPECT_THAT(*ListDirectory(root), UnorderedElementsAre("step-5", "step-10", "step-10-hf"));
  ExpectSameTensors(restart.Load(10)->model, MakeState(10).model);
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

TEST(CheckpointManagerTest, AFileNamedAsAStepIsRefusedNotReplaced) {
  const std::string root = TestRoot();
  CheckpointManager manager(root, 0);
  ASSERT_TRUE(manager.Save(2, MakeState(1), false).ok());
  ASSERT_TRUE(WriteFileAtomically(root + "/step-3", "notes").ok());
  EXPECT_THAT(manager.ListSteps().status().message(),
              HasSubstr(root + "/step-3 is named as a checkpoint step but is not a folder"));
  EXPECT_THAT(manager.Save(3, MakeState(2), false).message(),
              HasSubstr(root + "/step-3 is named as a checkpoint step but is not a folder"));
  EXPECT_EQ(*ReadFile(root + "/step-3"), "notes");
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

  // A resume tidies up too, before it saves (a run refused then may never save).
  const std::string deleting = root + "/step-5.tmp-12345-deleted";
  ASSERT_TRUE(MakeDirectories(deleting).ok());
  ASSERT_TRUE(manager.RecoverInterruptedRuns().ok());
  EXPECT_FALSE(PathExists(deleting));
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
  edited["format_version"] = 1;
  EXPECT_THAT(load_with(edited).message(), HasSubstr("format_version 1, expected 2"));

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

  edited = manifest;
  edited["tensors"][1]["global_shape"] = {8, 8};
  edited["tensors"][1]["offsets"] = {4, 0};  // Runs past row 8.
  EXPECT_THAT(load_with(edited).message(), HasSubstr("does not fit in [8, 8]"));

  edited = manifest;
  edited["tensors"].push_back(edited["tensors"][1]);  // The same piece listed twice.
  EXPECT_THAT(load_with(edited).message(), HasSubstr("overlap"));

  edited = manifest;
  edited["tensors"][0]["file"] = "../model.safetensors";
  EXPECT_THAT(load_with(edited).message(), HasSubstr("expected model[-RRRRR-of-WWWWW]"));

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
  EXPECT_THAT(status.message(), HasSubstr(manager.StepDirectory(4) + " (model)"));
  EXPECT_THAT(status.message(), HasSubstr("missing keys: layers.0.attention.wk.weight"));
  EXPECT_THAT(status.message(), HasSubstr("unexpected keys: layers.0.attention.wq.weight"));
  EXPECT_THAT(status.message(), HasSubstr("norm.weight: checkpoint [8], destination [3]"));
  EXPECT_TRUE(SameBits(model[0].second, untouched));
}

TEST(CheckpointManagerTest, PartialLoadIntoFillsAPipelineStagesShareOfTheModel) {
  CheckpointManager manager(TestRoot(), 0);
  const CheckpointState saved = MakeState(4);
  ASSERT_TRUE(manager.Save(4, saved, false).ok());
  NamedTensors stage = {MakeState(5).model[1]};
  EXPECT_THAT(manager.LoadInto(4, stage, nullptr, nullptr).message(),
              HasSubstr("unexpected keys"));
  ASSERT_TRUE(manager.LoadInto(4, stage, nullptr, nullptr, {}, true, /*partial=*/true).ok());
  EXPECT_TRUE(SameBits(stage[0].second, saved.model[1].second));
  // What the stage holds must still be there.
  stage[0].first = "layers.7.attention.wq.weight";
  EXPECT_THAT(manager.LoadInto(4, stage, nullptr, nullptr, {}, true, true).message(),
              HasSubstr("missing keys: layers.7.attention.wq.weight"));
}

TEST(CheckpointManagerTest, LongKeyListsAreCutToTheFirstFew) {
  CheckpointManager manager(TestRoot(), 0);
  ASSERT_TRUE(manager.Save(1, MakeState(1), false).ok());
  NamedTensors other;
  for (int i = 0; i < 40; ++i) other.emplace_back(absl::StrCat("other.", i), at::zeros({2}));
  const std::string message(manager.LoadInto(1, other, nullptr, nullptr).message());
  EXPECT_THAT(message, HasSubstr("missing keys: other.0, other.1, other.2, other.3, other.4, "
                                 "other.5, ... (40 in all)"));
  EXPECT_THAT(message, Not(HasSubstr("other.6")));
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

// Whole tensors of a small model and its optimizer state, rows that do not split evenly.
CheckpointState WholeState() {
  at::manual_seed(7);
  CheckpointState state;
  state.model = {{"w", at::randn({10, 3})},
                 {"emb", at::randn({5, 4}).to(at::kBFloat16)},
                 {"b", at::randn({10})},
                 {"scale", at::tensor(0.25)}};
  state.optimizer = {{"w.exp_avg", at::randn({10, 3})}, {"w.step", at::tensor(int64_t{3})}};
  state.extra = {{"train_state", {{"step", 3}}}};
  return state;
}

// Rank `rank` of `world` under FSDP's layout: dim 0 split in ceil(rows / world) row blocks (the
// last ranks hold fewer rows, or none); 0-dim tensors whole on rank 0 only when `for_saving`.
CheckpointState PiecesOf(const CheckpointState& whole, int rank, int world, bool for_saving) {
  CheckpointState pieces;
  auto split = [&](const NamedTensors& tensors, NamedTensors& out) {
    for (const auto& [name, tensor] : tensors) {
      if (tensor.dim() == 0) {
        if (!for_saving || rank == 0) out.emplace_back(name, tensor.clone());
        continue;
      }
      const int64_t rows = tensor.size(0);
      const int64_t per_rank = (rows + world - 1) / world;
      const int64_t begin = std::min<int64_t>(rank * per_rank, rows);
      const int64_t count = std::min<int64_t>(per_rank, rows - begin);
      out.emplace_back(name, for_saving ? tensor.narrow(0, begin, count).clone()
                                        : at::zeros_like(tensor.narrow(0, begin, count)));
      std::vector<int64_t> offsets(tensor.dim(), 0);
      offsets[0] = begin;
      pieces.boxes[name] = {tensor.sizes().vec(), offsets};
    }
  };
  split(whole.model, pieces.model);
  split(whole.optimizer, pieces.optimizer);
  if (rank == 0) pieces.extra = whole.extra;
  return pieces;
}

// Saves `step` as `states.size()` ranks do, each on its own thread with its own manager; returns
// each rank's status. Ranks with a null state never call Save (dead). Each call is a new run.
std::vector<absl::Status> SaveAsRanks(const std::string& root, int64_t step,
                                      const std::vector<const CheckpointState*>& states,
                                      absl::Duration commit_timeout = absl::Seconds(30),
                                      bool model_only = false) {
  const int world = static_cast<int>(states.size());
  std::vector<absl::Status> statuses(world);
  static int runs = 0;
  const std::string run_id = absl::StrCat("run-", ++runs);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    if (states[rank] == nullptr) continue;
    threads.emplace_back([&, rank] {
      CheckpointManager manager(root, 0, {rank, world, run_id, commit_timeout});
      statuses[rank] = manager.Save(step, *states[rank], model_only);
    });
  }
  for (std::thread& thread : threads) thread.join();
  return statuses;
}

// SaveAsRanks, then what TrainCheckpointer does once the ranks agreed on the outcome (the join is
// the agreement): when any rank failed, every rank calls DiscardFailedSave.
std::vector<absl::Status> SaveAsRanksAndAgree(const std::string& root, int64_t step,
                                              const std::vector<const CheckpointState*>& states) {
  const int world = static_cast<int>(states.size());
  std::vector<absl::Status> statuses(world);
  static int runs = 0;
  const std::string run_id = absl::StrCat("agreeing-run-", ++runs);
  std::vector<std::unique_ptr<CheckpointManager>> managers;
  for (int rank = 0; rank < world; ++rank) {
    managers.push_back(std::make_unique<CheckpointManager>(
        root, 0, CheckpointRanks{rank, world, run_id, absl::Seconds(30)}));
  }
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back(
        [&, rank] { statuses[rank] = managers[rank]->Save(step, *states[rank], false); });
  }
  for (std::thread& thread : threads) thread.join();
  const bool all_saved = std::all_of(statuses.begin(), statuses.end(),
                                     [](const absl::Status& status) { return status.ok(); });
  if (!all_saved) {
    threads.clear();
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back(
          [&, rank] { EXPECT_TRUE(managers[rank]->DiscardFailedSave(step).ok()); });
    }
    for (std::thread& thread : threads) thread.join();
  }
  return statuses;
}

TEST(CheckpointManagerTest, AFailedSaveOfSeveralRanksLeavesNoTemporaryOnceTheyAgree) {
  const std::string root = TestRoot();
  const CheckpointState whole = WholeState();
  std::vector<CheckpointState> saved;
  for (int rank = 0; rank < 2; ++rank) saved.push_back(PiecesOf(whole, rank, 2, true));
  for (const absl::Status& status : SaveAsRanksAndAgree(root, 1, {&saved[0], &saved[1]})) {
    ASSERT_TRUE(status.ok()) << status;
  }
  CheckpointManager manager(root, 0);

  // Rank 1 fails to write its part (as on a full disk); rank 0 wrote its own files.
  CheckpointState broken = saved[1];
  broken.boxes["w"].offsets = {9, 0};
  std::vector<absl::Status> statuses = SaveAsRanksAndAgree(root, 2, {&saved[0], &broken});
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kAborted);
  EXPECT_THAT(statuses[1].message(), HasSubstr("does not fit in [10, 3]"));
  EXPECT_THAT(manager.UncommittedStepFolders(), IsEmpty());

  // Every rank wrote, rank 0's commit failed (the pieces overlap).
  CheckpointState overlapping = PiecesOf(whole, 0, 2, true);
  overlapping.extra = nlohmann::json::object();
  overlapping.model.pop_back();  // "scale" whole on rank 0 only
  statuses = SaveAsRanksAndAgree(root, 2, {&saved[0], &overlapping});
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(statuses[1].ok()) << statuses[1];
  EXPECT_THAT(manager.UncommittedStepFolders(), IsEmpty());

  // The last good step is untouched.
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(1));
  absl::StatusOr<CheckpointState> loaded = manager.Load(1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameTensors(loaded->model, whole.model);
  ExpectSameTensors(loaded->optimizer, whole.optimizer);
}

TEST(CheckpointManagerTest, AModelOnlySaveOfSeveralRanksIsOneModelFile) {
  // A consolidated export: rank 0 holds the whole model, the others nothing.
  const std::string root = TestRoot();
  CheckpointState whole = WholeState();
  whole.optimizer.clear();
  const CheckpointState nothing;
  for (const absl::Status& status :
       SaveAsRanks(root, 5, {&whole, &nothing}, absl::Seconds(30), /*model_only=*/true)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  CheckpointManager manager(root, 0);
  absl::StatusOr<std::vector<std::string>> files = ListDirectory(manager.StepDirectory(5));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, testing::UnorderedElementsAre("manifest.json", "model.safetensors"));
  absl::StatusOr<CheckpointState> loaded = manager.Load(5);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameTensors(loaded->model, whole.model);
}

TEST(CheckpointManagerTest, RanksSavePiecesInParallelAndLoadsReshard) {
  const std::string root = TestRoot();
  const CheckpointState whole = WholeState();
  std::vector<CheckpointState> saved;
  for (int rank = 0; rank < 4; ++rank) saved.push_back(PiecesOf(whole, rank, 4, true));
  for (const absl::Status& status :
       SaveAsRanks(root, 3, {&saved[0], &saved[1], &saved[2], &saved[3]})) {
    ASSERT_TRUE(status.ok()) << status;
  }
  CheckpointManager manager(root, 0);
  absl::StatusOr<std::vector<std::string>> files = ListDirectory(manager.StepDirectory(3));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, testing::UnorderedElementsAre(
                          "manifest.json", "model-00000-of-00004.safetensors",
                          "model-00001-of-00004.safetensors", "model-00002-of-00004.safetensors",
                          "model-00003-of-00004.safetensors",
                          "optimizer-00000-of-00004.safetensors",
                          "optimizer-00001-of-00004.safetensors",
                          "optimizer-00002-of-00004.safetensors",
                          "optimizer-00003-of-00004.safetensors"));

  // One process: whole tensors, joined from the pieces.
  absl::StatusOr<CheckpointState> loaded = manager.Load(3);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameTensors(loaded->model, whole.model);
  ExpectSameTensors(loaded->optimizer, whole.optimizer);
  EXPECT_EQ(loaded->extra, whole.extra);

  // Two and three ranks: each gets its rows, read from the saved pieces they overlap.
  for (int world : {2, 3}) {
    for (int rank = 0; rank < world; ++rank) {
      CheckpointState target = PiecesOf(whole, rank, world, /*for_saving=*/false);
      nlohmann::json extra;
      ASSERT_TRUE(
          manager.LoadInto(3, target.model, &target.optimizer, &extra, target.boxes).ok());
      ExpectSameTensors(target.model, PiecesOf(whole, rank, world, true).model);
      ExpectSameTensors(target.optimizer, PiecesOf(whole, rank, world, true).optimizer);
      EXPECT_EQ(extra, whole.extra);
    }
  }

  // A piece that does not fit its tensor is refused before anything is read.
  CheckpointState target = PiecesOf(whole, 1, 2, false);
  target.boxes["w"].offsets = {8, 0};
  EXPECT_THAT(manager.LoadInto(3, target.model, nullptr, nullptr, target.boxes).message(),
              HasSubstr("w: checkpoint [10, 3], destination [5, 3] at [8, 0] of [10, 3]"));
}

TEST(CheckpointManagerTest, ADeadRankLeavesTheStepUncommittedAndTheLastOneLoadable) {
  const std::string root = TestRoot();
  const CheckpointState whole = WholeState();
  std::vector<CheckpointState> saved;
  for (int rank = 0; rank < 3; ++rank) saved.push_back(PiecesOf(whole, rank, 3, true));
  for (const absl::Status& status : SaveAsRanks(root, 1, {&saved[0], &saved[1], &saved[2]})) {
    ASSERT_TRUE(status.ok()) << status;
  }
  std::vector<absl::Status> statuses =
      SaveAsRanks(root, 2, {&saved[0], &saved[1], nullptr}, absl::Milliseconds(300));
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(statuses[0].message(), HasSubstr("rank(s) 2 did not finish"));
  CheckpointManager manager(root, 0);
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(1));
  absl::StatusOr<CheckpointState> loaded = manager.Load(1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameTensors(loaded->model, whole.model);

  // A rank that fails to write says so, and rank 0 stops waiting at once.
  CheckpointState broken = saved[1];
  broken.boxes["w"].offsets = {9, 0};
  const auto start = std::chrono::steady_clock::now();
  statuses = SaveAsRanks(root, 2, {&saved[0], &broken, &saved[2]}, absl::Seconds(60));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kAborted);
  EXPECT_THAT(statuses[0].message(), HasSubstr("rank 1 failed to write its part"));
  EXPECT_THAT(statuses[1].message(), HasSubstr("does not fit in [10, 3]"));
  EXPECT_THAT(*manager.ListSteps(), ElementsAre(1));
}

TEST(CheckpointManagerTest, PiecesThatDoNotTileATensorAreNotCommitted) {
  const std::string root = TestRoot();
  const CheckpointState whole = WholeState();
  // Both ranks claim rows 0-4 of every tensor: rows 5-9 are missing, rows 0-4 overlap.
  const CheckpointState rank0 = PiecesOf(whole, 0, 2, true);
  CheckpointState rank1 = PiecesOf(whole, 0, 2, true);
  rank1.extra = nlohmann::json::object();
  rank1.model.pop_back();  // "scale" whole on rank 0 only
  std::vector<absl::Status> statuses = SaveAsRanks(root, 1, {&rank0, &rank1});
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(statuses[0].message(), HasSubstr("overlap"));
  EXPECT_THAT(*CheckpointManager(root, 0).ListSteps(), IsEmpty());
}

}  // namespace
}  // namespace titan
