#include "lib/distributed/distributed_env.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/distributed/loopback_listener.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

TEST(DetectDistributedEnvTest, NoVariablesMeansOneProcess) {
  absl::StatusOr<DistributedEnv> env = DetectDistributedEnvFrom({});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "single");
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 1);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
}

TEST(DetectDistributedEnvTest, Torchrun) {
  absl::StatusOr<DistributedEnv> env = DetectDistributedEnvFrom({{"RANK", "5"},
                                                                 {"WORLD_SIZE", "8"},
                                                                 {"LOCAL_RANK", "1"},
                                                                 {"LOCAL_WORLD_SIZE", "4"},
                                                                 {"MASTER_ADDR", "node7"},
                                                                 {"MASTER_PORT", "1234"},
                                                                 {"SLURM_PROCID", "0"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "torchrun");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->master_addr, "node7");
  EXPECT_EQ(env->master_port, 1234);
}

TEST(DetectDistributedEnvTest, TorchrunWithoutLocalVariablesIsOneNode) {
  absl::StatusOr<DistributedEnv> env =
      DetectDistributedEnvFrom({{"RANK", "2"}, {"WORLD_SIZE", "3"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_rank, 2);
  EXPECT_EQ(env->local_world_size, 3);
}

TEST(DetectDistributedEnvTest, Slurm) {
  absl::StatusOr<DistributedEnv> env =
      DetectDistributedEnvFrom({{"SLURM_PROCID", "6"},
                                {"SLURM_NTASKS", "7"},
                                {"SLURM_LOCALID", "0"},
                                {"SLURM_NODEID", "3"},
                                {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"},
                                {"SLURM_JOB_NODELIST", "gpu-a[07-09,12],cpu1"},
                                {"SLURM_JOB_ID", "123456"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "slurm");
  EXPECT_EQ(env->rank, 6);
  EXPECT_EQ(env->world_size, 7);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 1);
  EXPECT_EQ(env->master_addr, "gpu-a07");
  EXPECT_EQ(env->master_port, 10000 + 123456 % 20000);
}

TEST(DetectDistributedEnvTest, SlurmHostlistWithSeveralBrackets) {
  absl::StatusOr<DistributedEnv> env =
      DetectDistributedEnvFrom({{"SLURM_PROCID", "1"},
                                {"SLURM_NTASKS", "4"},
                                {"SLURM_LOCALID", "1"},
                                {"SLURM_TASKS_PER_NODE", "2(x2)"},
                                {"SLURM_JOB_NODELIST", "rack[3-4]-n[01-02]"},
                                {"MASTER_PORT", "40000"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "rack3-n01");
  EXPECT_EQ(env->master_port, 40000);
}

TEST(DetectDistributedEnvTest, SlurmMasterAddrOverridesNodelist) {
  absl::StatusOr<DistributedEnv> env = DetectDistributedEnvFrom(
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a[1-2]"},
       {"MASTER_ADDR", "10.0.0.9"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_addr, "10.0.0.9");
}

TEST(DetectDistributedEnvTest, SlurmBadTasksPerNodeNamesVariable) {
  absl::StatusOr<DistributedEnv> env = DetectDistributedEnvFrom(
      {{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", "a1"},
       {"SLURM_TASKS_PER_NODE", "2(y3)"}});
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(env.status().message(), HasSubstr("SLURM_TASKS_PER_NODE"));
  EXPECT_THAT(env.status().message(), HasSubstr("2(y3)"));
}

TEST(DetectDistributedEnvTest, OpenMpi) {
  absl::StatusOr<DistributedEnv> env =
      DetectDistributedEnvFrom({{"OMPI_COMM_WORLD_RANK", "3"},
                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "openmpi");
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 3);
  EXPECT_EQ(env->master_addr, "127.0.0.1");
}

TEST(DetectDistributedEnvTest, OpenMpiAcrossHostsNeedsMasterAddr) {
  absl::StatusOr<DistributedEnv> env =
      DetectDistributedEnvFrom({{"OMPI_COMM_WORLD_RANK", "3"},
                                {"OMPI_COMM_WORLD_SIZE", "8"},
                                {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(env.status().message(), HasSubstr("MASTER_ADDR"));
}

TEST(DetectDistributedEnvTest, NonIntegerNamesVariableAndValue) {
  absl::StatusOr<DistributedEnv> env =
      DetectDistributedEnvFrom({{"RANK", "zero"}, {"WORLD_SIZE", "2"}});
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().message(),
            "environment variable RANK: expected integer, got \"zero\"");
}

TEST(DetectDistributedEnvTest, RankOutsideWorldIsAnError) {
  absl::StatusOr<DistributedEnv> env =
      DetectDistributedEnvFrom({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(env.status().message(), HasSubstr("rank 2 is outside world size 2"));
}

TEST(DetectDistributedEnvTest, MissingWorldSizeIsAnError) {
  absl::StatusOr<DistributedEnv> env = DetectDistributedEnvFrom({{"RANK", "0"}});
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(env.status().message(), HasSubstr("WORLD_SIZE is not set"));
}

TEST(DetectDistributedEnvTest, BadPortIsAnError) {
  absl::StatusOr<DistributedEnv> env = DetectDistributedEnvFrom(
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}});
  ASSERT_FALSE(env.ok());
  EXPECT_THAT(env.status().message(), HasSubstr("MASTER_PORT 70000"));
}

TEST(DetectDistributedEnvTest, StoreListenFdIsRankZeros) {
  absl::StatusOr<DistributedEnv> env = DetectDistributedEnvFrom(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TITAN_STORE_LISTEN_FD", "7"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->store_listen_fd, 7);
  env = DetectDistributedEnvFrom(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"TITAN_STORE_LISTEN_FD", "7"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->store_listen_fd, -1);
  env = DetectDistributedEnvFrom(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"TITAN_STORE_LISTEN_FD", "x"}});
  EXPECT_THAT(env.status().message(), HasSubstr("TITAN_STORE_LISTEN_FD: expected integer"));
}

TEST(DetectDistributedEnvTest, StoreListenFdMustListenOnMasterPort) {
  int port = 0;
  const int fd = ListenOnLoopback(&port);
  ASSERT_GE(fd, 0) << "cannot open a listening socket";
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_PORT", absl::StrCat(port).c_str(), 1);
  setenv("TITAN_STORE_LISTEN_FD", absl::StrCat(fd).c_str(), 1);
  absl::StatusOr<DistributedEnv> env = DetectDistributedEnv();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->store_listen_fd, fd);
  // Not passed on to rank 0's own children.
  EXPECT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

  setenv("MASTER_PORT", absl::StrCat(port == 65535 ? port - 1 : port + 1).c_str(), 1);
  EXPECT_THAT(DetectDistributedEnv().status().message(),
              HasSubstr(absl::StrCat("TITAN_STORE_LISTEN_FD=", fd,
                                     ": not a socket listening on MASTER_PORT")));
  setenv("MASTER_PORT", absl::StrCat(port).c_str(), 1);
  setenv("TITAN_STORE_LISTEN_FD", "0", 1);  // stdin
  EXPECT_THAT(DetectDistributedEnv().status().message(),
              HasSubstr("TITAN_STORE_LISTEN_FD=0: not a socket listening"));
  close(fd);
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_PORT", "TITAN_STORE_LISTEN_FD"}) {
    unsetenv(name);
  }
}

}  // namespace
}  // namespace titan
