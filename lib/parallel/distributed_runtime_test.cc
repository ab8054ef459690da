// Collective timeouts of a connected job (forked ranks, Gloo on loopback).
#include "lib/parallel/distributed_runtime.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/config/job_config.h"
#include "lib/parallel/fork_ranks.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

JobConfig TwoRankConfig() {
  absl::StatusOr<JobConfig> config = ParseJobConfig(
      "", {"--comm.train_timeout_seconds=1", "--parallelism.data_parallel_shard_degree=2"});
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

TEST(OneWriterTimeoutTest, TrainTimeoutPlusASecondPer32MiB) {
  const JobConfig config = TwoRankConfig();
  EXPECT_EQ(OneWriterTimeout(config, 0), absl::Seconds(1));
  EXPECT_EQ(OneWriterTimeout(config, int64_t{96} << 20), absl::Seconds(4));
  // A 70B model's bf16 export: 140 GB may take over an hour on a slow filesystem.
  EXPECT_GT(OneWriterTimeout(config, int64_t{140} * 1000 * 1000 * 1000), absl::Hours(1));
}

// Rank 0 works 2.5 s before the collective ("writes the model") while rank 1 waits in it: under
// the 1 s train timeout rank 1 gives up; inside a ScopedCollectiveTimeout for 96 MiB (4 s) both
// agree, and the timeout is 1 s again afterwards.
TEST(ScopedCollectiveTimeoutTest, LetsTheOthersWaitForOneWriterThenRestores) {
  const JobConfig config = TwoRankConfig();
  for (const bool scoped : {false, true}) {
    const std::vector<int> statuses =
        RunRuntimeRanks(config, 2, [&](int rank, const DistributedRuntime& runtime) {
          runtime.SetTimeout(absl::Seconds(config.comm().train_timeout_seconds()));
          std::optional<ScopedCollectiveTimeout> wait_for_writer;
          if (scoped) wait_for_writer.emplace(runtime, OneWriterTimeout(config, int64_t{96} << 20));
          if (rank == 0) ::usleep(2'500'000);
          const absl::StatusOr<bool> agreed = runtime.AllAgree(true);
          if (rank == 1) RANK_EXPECT(agreed.ok() == scoped);
          wait_for_writer.reset();
          RANK_EXPECT(runtime.timeout() == absl::Seconds(1));
          return 0;
        });
    EXPECT_EQ(statuses, std::vector<int>(2, 0)) << (scoped ? "scoped" : "train timeout");
  }
}

// A single process writes no dump, but an earlier run's left in its dump folder would read as its
// own: it sets them aside as rank 0 of a job does.
TEST(SingleProcessTest, SetsEarlierDumpsAside) {
  const std::string dump_folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/alone");
  std::filesystem::create_directories(dump_folder + "/comm_traces");
  for (const char* name : {"rank_0", "rank_1"}) {
    ASSERT_TRUE(WriteFileAtomically(absl::StrCat(dump_folder, "/comm_traces/", name), "old").ok());
  }
  absl::StatusOr<JobConfig> config = ParseJobConfig("", {"--job.dump_folder=" + dump_folder});
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<DistributedRuntime> runtime = DistributedRuntime::Connect(*config, {});
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  ASSERT_TRUE(runtime->StartCommTrace("7").ok());
  for (const char* name : {"rank_0", "rank_1"}) {
    EXPECT_FALSE(std::filesystem::exists(absl::StrCat(dump_folder, "/comm_traces/", name)));
    EXPECT_EQ(*ReadFile(absl::StrCat(dump_folder, "/comm_traces.earlier-7/", name)), "old");
  }
}

// SIGUSR1 (a dump request) in a single process says there is nothing to dump, rather than nothing.
TEST(SingleProcessTest, SaysSigusr1HasNothingToDump) {
  absl::StatusOr<JobConfig> config = ParseJobConfig("", {});
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(DistributedRuntime::Connect(*config, {}).ok());
  testing::internal::CaptureStderr();
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_THAT(testing::internal::GetCapturedStderr(),
              testing::HasSubstr("SIGUSR1: a single process issues no collectives"));
}

// A refusal raised inside the job (components, schedulers, parallelize) names where its key was
// set.
TEST(RunJobOnThisRankTest, RefusalNamesTheLineThatSetItsKey) {
  absl::StatusOr<JobConfig> config =
      ParseJobConfigText("[lr_scheduler]\ndecay_ratio = 0.5\n", "job.toml", {});
  ASSERT_TRUE(config.ok()) << config.status();
  const absl::Status status = RunJobOnThisRank(*config, [](const DistributedRuntime&) {
    return absl::InvalidArgumentError("[lr_scheduler] decay_ratio: refused");
  });
  EXPECT_EQ(status.message(), "job.toml:2: [lr_scheduler] decay_ratio: refused");
}

}  // namespace
}  // namespace titan
