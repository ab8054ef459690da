// c10d's ProcessGroupNCCL behind titan's Communicator on one GPU (a group of one: NCCL allows one
// rank per device). Skipped where no CUDA device exists, i.e. on the CPU-only CI machines; run it
// on a GPU machine (it passed on one H200, 2026-12-04).
#include "lib/distributed/nccl_communicator.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Sleep.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/distributed/comm_trace.h"
#include "lib/distributed/gloo_communicator.h"
#include "lib/distributed/loopback_listener.h"
#include "lib/distributed/rendezvous.h"

namespace titan {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Rendezvous> ConnectAlone() {
  int port = 0;
  const int listen_fd = ListenOnLoopback(&port);
  EXPECT_GE(listen_fd, 0) << "cannot open a listening socket";
  DistributedEnv env;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  env.store_listen_fd = listen_fd;
  RendezvousOptions options;
  options.timeout = absl::Seconds(20);
  absl::StatusOr<std::shared_ptr<Rendezvous>> rendezvous = Rendezvous::Connect(env, options);
  EXPECT_TRUE(rendezvous.ok()) << rendezvous.status();
  return rendezvous.ok() ? *rendezvous : nullptr;
}

// A group of one on GPU 0, "solo", over a rendezvous of its own.
class SoloNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!at::hasCUDA() || at::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    rendezvous_ = ConnectAlone();
    ASSERT_NE(rendezvous_, nullptr);
    absl::StatusOr<std::unique_ptr<Communicator>> nccl =
        CreateNcclCommunicator(rendezvous_, "solo", {0}, /*device=*/0, absl::Seconds(30));
    ASSERT_TRUE(nccl.ok()) << nccl.status();
    nccl_ = *std::move(nccl);
  }

  std::shared_ptr<Rendezvous> rendezvous_;
  std::unique_ptr<Communicator> nccl_;
};

TEST_F(SoloNcclTest, CollectivesOnOneGpuAndDispatchByDevice) {
  absl::StatusOr<std::unique_ptr<Communicator>> gloo =
      CreateGlooCommunicator(rendezvous_, "solo", {0}, absl::Seconds(30));
  ASSERT_TRUE(gloo.ok()) << gloo.status();
  std::unique_ptr<Communicator> comm =
      CreateDeviceDispatchingCommunicator(*std::move(gloo), std::move(nccl_));

  const auto cuda = at::TensorOptions().device(at::kCUDA, 0);
  // Queued right before the collective on the compute stream: the event orders NCCL after it.
  at::Tensor x = at::arange(1 << 20, cuda.dtype(at::kFloat)).mul_(2);
  ASSERT_TRUE(Await(comm->AllReduce(x, ReduceOp::kSum)).ok());
  EXPECT_TRUE(x.equal(at::arange(1 << 20, cuda.dtype(at::kFloat)) * 2));
  at::Tensor gathered = at::empty({1 << 20}, cuda.dtype(at::kFloat));
  ASSERT_TRUE(Await(comm->AllGather(x, gathered)).ok());
  EXPECT_TRUE(gathered.equal(x));
  at::Tensor scattered = at::empty({1 << 20}, cuda.dtype(at::kFloat));
  ASSERT_TRUE(Await(comm->ReduceScatter(x, scattered, ReduceOp::kMax)).ok());
  EXPECT_TRUE(scattered.equal(x));
  at::Tensor bf16 = at::ones({7}, cuda.dtype(at::kBFloat16));
  ASSERT_TRUE(Await(comm->Broadcast(bf16, 0)).ok());
  ASSERT_TRUE(Await(comm->Barrier()).ok());
  at::Tensor cpu = at::full({3}, 4.0);  // Goes to Gloo.
  ASSERT_TRUE(Await(comm->AllReduce(cpu, ReduceOp::kSum)).ok());
  EXPECT_TRUE(cpu.equal(at::full({3}, 4.0)));

  EXPECT_THAT(Await(comm->AllGather(x, at::empty({3}, cuda.dtype(at::kFloat)))).message(),
              HasSubstr("all_gather on group \"solo\": expected 1048576"));
}

// A batch is one NCCL group: a send to this member and its receive, which as separate operations
// on one stream would wait for each other, complete together.
TEST_F(SoloNcclTest, BatchedSendAndReceiveToItself) {
  const auto cuda = at::TensorOptions().device(at::kCUDA, 0).dtype(at::kFloat);
  const at::Tensor sent = at::arange(1 << 22, cuda);
  at::Tensor received = at::zeros({1 << 22}, cuda);
  const at::Tensor sent_too = at::full({5}, 3.0, cuda);
  at::Tensor received_too = at::zeros({5}, cuda);
  ASSERT_TRUE(Await(nccl_->BatchP2P({{true, sent, 0, 0},
                                     {false, received, 0, 0},
                                     {true, sent_too, 0, 1},
                                     {false, received_too, 0, 1}}))
                  .ok());
  EXPECT_TRUE(received.equal(sent));
  EXPECT_TRUE(received_too.equal(sent_too));
}

// Wait orders the caller's stream after the collective and returns: the host does not wait for
// the device (a c10d wait with a timeout would block it until the collective ends).
TEST_F(SoloNcclTest, WaitLeavesTheHostRunning) {
  at::Tensor x = at::ones({1024}, at::TensorOptions().device(at::kCUDA, 0));
  ASSERT_TRUE(Await(nccl_->AllReduce(x, ReduceOp::kSum)).ok());  // connects
  at::cuda::getCurrentCUDAStream(0).synchronize();
  // About a second of device work queued before the collective, which waits for it.
  at::cuda::sleep(int64_t{2} << 30);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Work>> work = nccl_->AllReduce(x, ReduceOp::kSum);
  ASSERT_TRUE(work.ok()) << work.status();
  ASSERT_TRUE((*work)->Wait().ok());
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_FALSE((*work)->IsCompleted());
  at::cuda::getCurrentCUDAStream(0).synchronize();
  EXPECT_TRUE((*work)->IsCompleted());
  EXPECT_TRUE(x.equal(at::ones_like(x)));
}

// A sub-group split from the world's NCCL communicator, and the trace of both: NCCL operations
// complete through the event recorded after the device-side wait.
TEST(NcclCommunicatorTest, SplitGroupAndTrace) {
  if (!at::hasCUDA() || at::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::shared_ptr<Rendezvous> rendezvous = ConnectAlone();
  ASSERT_NE(rendezvous, nullptr);
  CommTraceOptions options;
  options.buffer_size = 16;
  options.folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/nccl_trace");
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  absl::StatusOr<std::unique_ptr<Communicator>> world =
      CreateNcclCommunicator(rendezvous, "world", {0}, 0, absl::Seconds(30), *trace);
  ASSERT_TRUE(world.ok()) << world.status();
  absl::StatusOr<std::unique_ptr<Communicator>> sub =
      CreateNcclCommunicator(rendezvous, "dp/0", {0}, 0, absl::Seconds(30), *trace, world->get());
  ASSERT_TRUE(sub.ok()) << sub.status();
  at::Tensor x = at::ones({1024}, at::TensorOptions().device(at::kCUDA, 0));
  ASSERT_TRUE(Await((*sub)->AllReduce(x, ReduceOp::kSum)).ok());
  ASSERT_TRUE(Await((*world)->AllReduce(x, ReduceOp::kSum)).ok());
  at::cuda::getCurrentCUDAStream(0).synchronize();
  EXPECT_TRUE(x.equal(at::ones_like(x)));
  ASSERT_TRUE((*trace)->Dump("test").ok());
  EXPECT_TRUE(std::filesystem::exists((*trace)->DumpPath()));
}

}  // namespace
}  // namespace titan
