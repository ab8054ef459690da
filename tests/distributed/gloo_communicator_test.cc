// GlooCommunicator across real processes on loopback: the test forks its ranks (before it touches
// LibTorch, so no thread pool is split by fork), waits for them with a deadline and kills them on
// failure. Ranks report through their exit status, stderr and files in $TEST_TMPDIR.
#include "lib/distributed/gloo_communicator.h"

#include <ATen/ATen.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <torch/csrc/distributed/c10d/FlightRecorder.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/distributed/comm_trace.h"
#include "lib/distributed/communicator.h"
#include "lib/distributed/loopback_listener.h"
#include "lib/distributed/mesh_communicators.h"
#include "lib/distributed/parallel_dims.h"
#include "lib/distributed/rendezvous.h"

namespace titan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A failed check inside a rank: says why on stderr and fails the rank (gtest lives in the parent).
#define RANK_CHECK(cond, what)                                                          \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "rank %d: %s:%d: %s\n", rank, __FILE__, __LINE__,            \
                   std::string(what).c_str());                                          \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)
#define RANK_CHECK_OK(expr)                                      \
  do {                                                           \
    const absl::Status rank_status_ = (expr);                    \
    RANK_CHECK(rank_status_.ok(), rank_status_.ToString());      \
  } while (0)

using RankBody = std::function<int(int rank, std::shared_ptr<Rendezvous> rendezvous)>;

std::string ResultPath(const std::string& test, int rank) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", test, ".rank", rank, ".txt");
}

void WriteResult(const std::string& test, int rank, const std::string& text) {
  std::ofstream(ResultPath(test, rank)) << text;
}

std::string ReadResult(const std::string& test, int rank) {
  std::ifstream in(ResultPath(test, rank));
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// Forks `world` ranks (or only the first `started`) that rendezvous on a port the parent holds
// open (no race for it) within `connect_timeout`, runs `body` in each and returns their exit
// statuses; ranks still running at `deadline` are killed. A rank that cannot connect writes why as
// its result of test `failed_connect`.
std::vector<int> RunRanks(int world, absl::Duration deadline, const RankBody& body,
                          int started = -1, absl::Duration connect_timeout = absl::Seconds(20),
                          const std::string& failed_connect = "connect") {
  int port = 0;
  const int listen_fd = ListenOnLoopback(&port);
  if (listen_fd < 0) {
    ADD_FAILURE() << "cannot open a listening socket";
    return {};
  }
  if (started < 0) started = world;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < started; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      DistributedEnv env;
      env.rank = rank;
      env.local_rank = rank;
      env.world_size = world;
      env.local_world_size = world;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      env.source = "test";
      RendezvousOptions options;
      options.timeout = connect_timeout;
      if (rank == 0) {
        env.store_listen_fd = listen_fd;
      } else {
        close(listen_fd);
      }
      absl::StatusOr<std::shared_ptr<Rendezvous>> rendezvous = Rendezvous::Connect(env, options);
      int code = 1;
      if (rendezvous.ok()) {
        code = body(rank, *rendezvous);
      } else {
        std::fprintf(stderr, "rank %d: %s\n", rank, rendezvous.status().ToString().c_str());
        WriteResult(failed_connect, rank, std::string(rendezvous.status().message()));
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);  // No atexit handlers or static destructors in a forked copy of gtest.
    }
    pids.push_back(pid);
  }
  close(listen_fd);
  std::vector<int> statuses(started, -1);
  const absl::Time stop = absl::Now() + deadline;
  int running = started;
  while (running > 0 && absl::Now() < stop) {
    for (int rank = 0; rank < started; ++rank) {
      int wait_status = 0;
      if (statuses[rank] == -1 && waitpid(pids[rank], &wait_status, WNOHANG) == pids[rank]) {
        statuses[rank] = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
                                                : 128 + WTERMSIG(wait_status);
        --running;
      }
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (int rank = 0; rank < started; ++rank) {
    if (statuses[rank] == -1) {
      ADD_FAILURE() << "rank " << rank << " still running after " << deadline << "; killed";
      kill(pids[rank], SIGKILL);
      waitpid(pids[rank], nullptr, 0);
    }
  }
  return statuses;
}

// The input rank `r` contributes: distinct per rank and element, exact in fp32 and int64.
at::Tensor Input(int r, int64_t n, at::ScalarType dtype) {
  return (at::arange(n, at::kLong) * (r + 1) + 3 * r + 1).to(dtype);
}

bool Same(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && at::equal(a, b);
}

std::vector<int> Iota(int n) {
  std::vector<int> ranks;
  for (int i = 0; i < n; ++i) ranks.push_back(i);
  return ranks;
}

// Every collective on the world group, checked against results computed locally from every rank's
// input.
int AllCollectives(int rank, std::shared_ptr<Rendezvous> rendezvous) {
  const int world = rendezvous->env().world_size;
  absl::StatusOr<std::unique_ptr<Communicator>> made =
      CreateGlooCommunicator(rendezvous, "world", Iota(world), absl::Seconds(10));
  RANK_CHECK_OK(made.status());
  Communicator& comm = **made;
  RANK_CHECK(comm.rank() == rank && comm.size() == world, "rank/size");

  for (at::ScalarType dtype : {at::kFloat, at::kLong}) {
    const std::string type = c10::toString(dtype);
    const std::pair<ReduceOp, std::function<at::Tensor(at::Tensor, at::Tensor)>> reductions[] = {
        {ReduceOp::kSum, [](at::Tensor a, at::Tensor b) { return a + b; }},
        {ReduceOp::kProduct, [](at::Tensor a, at::Tensor b) { return a * b; }},
        {ReduceOp::kMin, [](at::Tensor a, at::Tensor b) { return at::minimum(a, b); }},
        {ReduceOp::kMax, [](at::Tensor a, at::Tensor b) { return at::maximum(a, b); }}};
    for (const auto& [op, combine] : reductions) {
      at::Tensor tensor = Input(rank, 7, dtype);
      at::Tensor expected = Input(0, 7, dtype);
      for (int r = 1; r < world; ++r) expected = combine(expected, Input(r, 7, dtype));
      RANK_CHECK_OK(Await(comm.AllReduce(tensor, op)));
      RANK_CHECK(Same(tensor, expected), "all_reduce " + type);
    }

    at::Tensor gathered = at::zeros({world * 2, 3}, dtype);
    RANK_CHECK_OK(Await(comm.AllGather(Input(rank, 6, dtype).view({2, 3}), gathered)));
    std::vector<at::Tensor> parts;
    for (int r = 0; r < world; ++r) parts.push_back(Input(r, 6, dtype).view({2, 3}));
    RANK_CHECK(Same(gathered, at::cat(parts)), "all_gather " + type);

    at::Tensor scattered = at::zeros({4}, dtype);
    RANK_CHECK_OK(Await(comm.ReduceScatter(Input(rank, 4 * world, dtype), scattered, ReduceOp::kSum)));
    at::Tensor total = at::zeros({4 * world}, dtype);
    for (int r = 0; r < world; ++r) total += Input(r, 4 * world, dtype);
    RANK_CHECK(Same(scattered, total.slice(0, 4 * rank, 4 * rank + 4)), "reduce_scatter " + type);

    at::Tensor broadcast = Input(rank, 5, dtype);
    RANK_CHECK_OK(Await(comm.Broadcast(broadcast, world - 1)));
    RANK_CHECK(Same(broadcast, Input(world - 1, 5, dtype)), "broadcast " + type);

    // Member i's slice j = 100 i + 10 j + k arrives as slice i of member j.
    at::Tensor to_send = (at::arange(2 * world, at::kLong) % 2 +
                          at::arange(2 * world, at::kLong).div(2, "floor") * 10 + 100 * rank)
                             .to(dtype);
    at::Tensor received = at::full({2 * world}, -1, dtype);
    RANK_CHECK_OK(Await(comm.AllToAll(to_send, received)));
    at::Tensor expected = (at::arange(2 * world, at::kLong) % 2 + 10 * rank +
                           at::arange(2 * world, at::kLong).div(2, "floor") * 100)
                              .to(dtype);
    RANK_CHECK(Same(received, expected), "all_to_all " + type);

    // A ring: everyone sends to the next rank and receives from the previous one.
    at::Tensor from_prev = at::zeros({9}, dtype);
    absl::StatusOr<std::unique_ptr<Work>> recv = comm.Recv(from_prev, (rank + world - 1) % world, 7);
    absl::StatusOr<std::unique_ptr<Work>> send = comm.Send(Input(rank, 9, dtype), (rank + 1) % world, 7);
    RANK_CHECK_OK(recv.status());
    RANK_CHECK_OK(send.status());
    RANK_CHECK_OK((*send)->Wait());
    RANK_CHECK_OK((*recv)->Wait());
    RANK_CHECK(Same(from_prev, Input((rank + world - 1) % world, 9, dtype)), "send/recv " + type);

    // The same ring both ways as one batch, each member's send listed before its receives.
    at::Tensor from_next = at::zeros({9}, dtype);
    from_prev.zero_();
    std::vector<P2POp> ring = {{true, Input(rank, 9, dtype), (rank + 1) % world, 8},
                               {false, from_prev, (rank + world - 1) % world, 8}};
    if (world > 2) {
      ring.push_back({true, Input(rank, 9, dtype), (rank + world - 1) % world, 9});
      ring.push_back({false, from_next, (rank + 1) % world, 9});
    }
    RANK_CHECK_OK(Await(comm.BatchP2P(ring)));
    RANK_CHECK(Same(from_prev, Input((rank + world - 1) % world, 9, dtype)), "batch_p2p " + type);
    if (world > 2) {
      RANK_CHECK(Same(from_next, Input((rank + 1) % world, 9, dtype)), "batch_p2p back " + type);
    }
  }

  // Several operations in flight at once, waited for in reverse order, with compute in between.
  std::vector<at::Tensor> tensors;
  std::vector<std::unique_ptr<Work>> works;
  for (int i = 0; i < 3; ++i) {
    tensors.push_back(at::full({1 << 18}, static_cast<float>(rank + i), at::kFloat));
    absl::StatusOr<std::unique_ptr<Work>> work = comm.AllReduce(tensors.back(), ReduceOp::kSum);
    RANK_CHECK_OK(work.status());
    works.push_back(*std::move(work));
  }
  const at::Tensor busy = at::mm(at::ones({128, 128}), at::ones({128, 128}));
  RANK_CHECK(busy[0][0].item<float>() == 128.0f, "compute while communicating");
  for (int i = 2; i >= 0; --i) {
    RANK_CHECK_OK(works[i]->Wait());
    RANK_CHECK(works[i]->IsCompleted(), "completed after Wait");
    const float expected = static_cast<float>(world * (world - 1) / 2 + world * i);
    RANK_CHECK(at::equal(tensors[i], at::full({1 << 18}, expected, at::kFloat)), "async all_reduce");
  }

  // Strings of different lengths (rank 0's empty), each rank's arriving whole at every rank.
  absl::StatusOr<std::vector<std::string>> strings =
      AllGatherStrings(comm, std::string(5 * rank, static_cast<char>('a' + rank)));
  RANK_CHECK_OK(strings.status());
  RANK_CHECK(static_cast<int>(strings->size()) == world, "AllGatherStrings: one per rank");
  for (int r = 0; r < world; ++r) {
    RANK_CHECK((*strings)[r] == std::string(5 * r, static_cast<char>('a' + r)),
               "AllGatherStrings: rank " + std::to_string(r) + "'s string");
  }

  // Argument errors are caught before anything is sent.
  absl::Status self = comm.BatchP2P({{true, at::zeros({2}), rank, 0}}).status();
  RANK_CHECK(self.code() == absl::StatusCode::kInvalidArgument, self.ToString());
  RANK_CHECK(self.message().find("is not another member") != std::string::npos, self.ToString());
  absl::Status bad = comm.AllGather(at::zeros({2}), at::zeros({3})).status();
  RANK_CHECK(bad.code() == absl::StatusCode::kInvalidArgument, bad.ToString());
  RANK_CHECK(bad.message().find("all_gather on group \"world\"") != std::string::npos,
             bad.ToString());
  RANK_CHECK_OK(Await(comm.Barrier()));
  return 0;
}

TEST(GlooCommunicatorTest, EveryCollectiveExactTwoRanks) {
  std::vector<int> statuses = RunRanks(2, absl::Seconds(60), AllCollectives);
  EXPECT_THAT(statuses, ::testing::Each(0));
}

TEST(GlooCommunicatorTest, EveryCollectiveExactFourRanks) {
  std::vector<int> statuses = RunRanks(4, absl::Seconds(60), AllCollectives);
  EXPECT_THAT(statuses, ::testing::Each(0));
}

// A rank whose peer has gone must fail with c10d's error, not die of SIGPIPE (exit 141, no reason
// printed), as Gloo's writev to that peer's socket would raise it: after joining a group, writing
// to a socket with no reader returns EPIPE.
TEST(GlooCommunicatorTest, WriteToDepartedPeerFailsInsteadOfKillingTheRank) {
  std::vector<int> statuses = RunRanks(2, absl::Seconds(60), [](int rank, auto rendezvous) {
    RANK_CHECK_OK(CreateGlooCommunicator(rendezvous, "pipes", {0, 1}, absl::Seconds(20)).status());
    int ends[2];
    RANK_CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, ends) == 0, "socketpair");
    close(ends[1]);
    const char byte = 0;
    RANK_CHECK(write(ends[0], &byte, 1) == -1 && errno == EPIPE, "write to a closed peer");
    return 0;
  });
  EXPECT_THAT(statuses, ::testing::Each(0));
}

// MeshCommunicators over ParallelDims (dp_replicate=2 × dp_shard=2 × tp=2 on 8 ranks): an
// all-reduce of 2^rank in each group sums exactly the ranks ParallelDims lists for it.
TEST(GlooCommunicatorTest, MeshGroupsSumTheirOwnRanks) {
  std::vector<int> statuses = RunRanks(8, absl::Seconds(60), [](int rank, auto rendezvous) {
    absl::StatusOr<ParallelDims> dims = ParallelDims::Build(2, -1, 1, 2, 1, 8);
    RANK_CHECK_OK(dims.status());
    absl::StatusOr<MeshCommunicators> mesh = MeshCommunicators::Create(
        *dims, rank, [&](const std::string& name, std::vector<int> ranks) {
          return CreateGlooCommunicator(rendezvous, name, std::move(ranks), absl::Seconds(10));
        });
    RANK_CHECK_OK(mesh.status());
    const std::pair<MeshGroup, std::vector<MeshDim>> kGroups[] = {
        {MeshGroup::kWorld, {MeshDim::kPp, MeshDim::kDpReplicate, MeshDim::kDpShard, MeshDim::kCp,
                             MeshDim::kTp}},
        {MeshGroup::kDpReplicate, {MeshDim::kDpReplicate}},
        {MeshGroup::kDpShard, {MeshDim::kDpShard}},
        {MeshGroup::kTp, {MeshDim::kTp}},
        {MeshGroup::kDp, {MeshDim::kDpReplicate, MeshDim::kDpShard}},
        {MeshGroup::kDpShardCp, {MeshDim::kDpShard, MeshDim::kCp}},
        {MeshGroup::kPp, {MeshDim::kPp}}};
    for (const auto& [group, mesh_dims] : kGroups) {
      Communicator& comm = mesh->Get(group);
      const std::vector<int> ranks = dims->GroupRanks(rank, mesh_dims);
      RANK_CHECK(comm.global_ranks() == ranks, comm.name() + " ranks");
      at::Tensor tensor = at::full({3}, int64_t{1} << rank, at::kLong);
      RANK_CHECK_OK(Await(comm.AllReduce(tensor, ReduceOp::kSum)));
      int64_t expected = 0;
      for (int r : ranks) expected += int64_t{1} << r;
      RANK_CHECK(at::equal(tensor, at::full({3}, expected, at::kLong)), comm.name() + " sum");
    }
    RANK_CHECK_OK(Await(mesh->Get(MeshGroup::kWorld).Barrier()));
    return 0;
  });
  EXPECT_THAT(statuses, ::testing::Each(0));
}

// Ranks exit together: none closes its connections while others still wait on it (that would end
// their wait early), and rank 0, the store's host, goes last.
int LeaveTogether(int rank, const std::shared_ptr<Rendezvous>& rendezvous, const std::string& key) {
  const int world = rendezvous->env().world_size;
  rendezvous->store()->add(key, 1);
  const absl::Time stop = absl::Now() + absl::Seconds(20);
  while (rendezvous->store()->add(key, 0) < world && absl::Now() < stop) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (rank == 0) absl::SleepFor(absl::Milliseconds(200));
  return 0;
}

TEST(GlooCommunicatorTest, SkippedCollectiveTimesOutNamingTheMissingRank) {
  const std::string kTest = "skipped";
  const absl::Duration kTimeout = absl::Seconds(2);
  std::vector<int> statuses = RunRanks(4, absl::Seconds(30), [&](int rank, auto rendezvous) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        CreateGlooCommunicator(rendezvous, "world", Iota(4), kTimeout);
    RANK_CHECK_OK(comm.status());
    at::Tensor tensor = at::ones({16});
    RANK_CHECK_OK(Await((*comm)->AllReduce(tensor, ReduceOp::kSum)));
    if (rank != 2) {
      const absl::Time start = absl::Now();
      absl::Status status = Await((*comm)->AllReduce(tensor, ReduceOp::kSum));
      WriteResult(kTest, rank,
                  absl::StrCat(absl::ToDoubleSeconds(absl::Now() - start), "\n", status.ToString()));
    }
    return LeaveTogether(rank, rendezvous, "skipped/done");
  });
  EXPECT_THAT(statuses, ::testing::Each(0));
  for (int rank : {0, 1, 3}) {
    std::istringstream result(ReadResult(kTest, rank));
    double seconds = 0;
    result >> seconds;
    const std::string message(std::istreambuf_iterator<char>(result), {});
    std::cout << "rank " << rank << " after " << seconds << " s:" << message << "\n";
    EXPECT_THAT(message, HasSubstr("all_reduce #2 on group \"world\" (job ranks 0,1,2,3) failed"))
        << "rank " << rank;
    EXPECT_THAT(message, HasSubstr("ranks that did not arrive: 2")) << "rank " << rank;
    EXPECT_THAT(message, Not(HasSubstr("arrive: 2,"))) << "rank " << rank;
    EXPECT_GE(seconds, absl::ToDoubleSeconds(kTimeout) - 0.1) << "rank " << rank;
    EXPECT_LT(seconds, absl::ToDoubleSeconds(kTimeout) + 3) << "rank " << rank;
  }
}

// titan's recorder holds the Gloo operations; c10d's own (ProcessGroupGloo records into it in torch
// 2.11) stays empty, so nothing is recorded twice.
TEST(GlooCommunicatorTest, OperationsAreTracedOnceByTitansRecorder) {
  std::vector<int> statuses = RunRanks(2, absl::Seconds(30), [](int rank, auto rendezvous) {
    CommTraceOptions options;
    options.buffer_size = 8;
    options.folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/traced");
    options.rank = rank;
    absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
    RANK_CHECK_OK(trace.status());
    // c10d's watchdog waits for the dump as long as titan's peer_dump_wait (5 s) and 5 s more.
    const char* dump_wait = std::getenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC");
    RANK_CHECK(dump_wait != nullptr && std::string(dump_wait) == "10000", "dump wait not set");
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        CreateGlooCommunicator(rendezvous, "world", Iota(2), absl::Seconds(10), *trace);
    RANK_CHECK_OK(comm.status());
    at::Tensor tensor = at::ones({5});
    RANK_CHECK_OK(Await((*comm)->AllReduce(tensor, ReduceOp::kSum)));
    RANK_CHECK_OK(Await((*comm)->Barrier()));
    const std::string native = c10d::dump_fr_trace_json(true, false);
    RANK_CHECK(native.find("\"entries\"") == std::string::npos, native);
    RANK_CHECK_OK((*trace)->Dump("test"));
    std::ifstream dump((*trace)->DumpPath());
    const std::string pickle((std::istreambuf_iterator<char>(dump)), {});
    RANK_CHECK(pickle.find("nccl:all_reduce") != std::string::npos, "all_reduce not recorded");
    RANK_CHECK(pickle.find("nccl:all_reduce_barrier") != std::string::npos, "barrier not recorded");
    return LeaveTogether(rank, rendezvous, "traced/done");
  });
  EXPECT_THAT(statuses, ::testing::Each(0));
}

// Every awaited operation reads completed in the dump, and pg_status counts it; FSDP's
// reduce-scatters once stayed "scheduled" while pg_status counted them done.
TEST(GlooCommunicatorTest, AwaitedOperationsReadCompleted) {
  std::vector<int> statuses = RunRanks(2, absl::Seconds(30), [](int rank, auto rendezvous) {
    CommTraceOptions options;
    options.buffer_size = 16;
    options.folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/completed");
    options.rank = rank;
    absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
    RANK_CHECK_OK(trace.status());
    absl::StatusOr<std::unique_ptr<Communicator>> comm =
        CreateGlooCommunicator(rendezvous, "world", Iota(2), absl::Seconds(10), *trace);
    RANK_CHECK_OK(comm.status());
    at::Tensor whole = at::ones({8});
    at::Tensor half = at::zeros({4});
    RANK_CHECK_OK(Await((*comm)->AllReduce(whole, ReduceOp::kSum)));
    RANK_CHECK_OK(Await((*comm)->ReduceScatter(whole, half, ReduceOp::kSum)));
    RANK_CHECK_OK(Await((*comm)->AllGather(half, whole)));
    RANK_CHECK_OK((*trace)->Dump("test"));
    std::ifstream file((*trace)->DumpPath());
    const std::string pickle((std::istreambuf_iterator<char>(file)), {});
    const auto dump = torch::jit::unpickle(pickle.data(), pickle.size()).toGenericDict();
    const auto entries = dump.at("entries").toList();
    RANK_CHECK(entries.size() == 3, absl::StrCat(entries.size(), " entries"));
    for (size_t i = 0; i < entries.size(); ++i) {
      const auto entry = entries.get(i).toGenericDict();
      RANK_CHECK(entry.at("state").toStringRef() == "completed",
                 absl::StrCat(entry.at("profiling_name").toStringRef(), " reads ",
                              entry.at("state").toStringRef()));
    }
    const auto status = dump.at("pg_status").toGenericDict().at("0").toGenericDict();
    RANK_CHECK(status.at("last_completed_collective").toInt() == 3, "pg_status not at 3");
    return LeaveTogether(rank, rendezvous, "completed/done");
  });
  EXPECT_THAT(statuses, ::testing::Each(0));
}

TEST(GlooCommunicatorTest, MemberThatNeverJoinsIsNamed) {
  const std::string kTest = "never_joins";
  std::vector<int> statuses = RunRanks(3, absl::Seconds(30), [&](int rank, auto rendezvous) {
    if (rank != 1) {
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          CreateGlooCommunicator(rendezvous, "late", Iota(3), absl::Seconds(2));
      WriteResult(kTest, rank, comm.status().ToString());
    }
    return LeaveTogether(rank, rendezvous, "never_joins/done");
  });
  EXPECT_THAT(statuses, ::testing::Each(0));
  for (int rank : {0, 2}) {
    const std::string message = ReadResult(kTest, rank);
    std::cout << "rank " << rank << ": " << message << "\n";
    EXPECT_THAT(message, HasSubstr("create_group #0 on group \"late\"")) << message;
    EXPECT_THAT(message, HasSubstr("ranks that did not arrive: 1")) << message;
  }
}

TEST(GlooCommunicatorTest, RankThatNeverStartsIsNamedByTheRendezvous) {
  // Ranks 0 and 1 of 3 start; rank 2 never does (a node that never came up).
  const std::string kTest = "never_starts";
  std::vector<int> statuses = RunRanks(
      3, absl::Seconds(30), [](int, auto) { return 0; }, /*started=*/2, absl::Seconds(2), kTest);
  EXPECT_THAT(statuses, ::testing::Each(1));
  for (int rank : {0, 1}) {
    const std::string message = ReadResult(kTest, rank);
    std::cout << "rank " << rank << ": " << message << "\n";
    EXPECT_THAT(message, HasSubstr(absl::StrCat("rendezvous: rank ", rank,
                                                " of 3: ranks that never "
                                                "joined the store at 127.0.0.1:")))
        << message;
    EXPECT_THAT(message, ::testing::EndsWith(" within 2s: 2")) << message;
  }
}

// Rank 1 of 2 whose MASTER_PORT is a loopback port bound to `fd` (listening or not), which the
// caller closes.
void RankOneOfTwoAtALoopbackPort(bool listen, int* fd, DistributedEnv* env) {
  *fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(*fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  if (listen) {
    ASSERT_EQ(::listen(*fd, 8), 0);
  }
  socklen_t size = sizeof(addr);
  ASSERT_EQ(getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &size), 0);
  env->rank = 1;
  env->world_size = 2;
  env->master_port = ntohs(addr.sin_port);
}

// Rank 1 of 2 whose rank 0 never starts: one line, after the timeout, not c10d's client retrying
// past it (2.3 times it, with a stack trace each time it gave up).
TEST(GlooCommunicatorTest, StoreThatNeverListensIsReportedAtTheTimeout) {
  // A bound port that nothing listens on (kept bound, so nothing else takes it meanwhile).
  int fd = -1;
  DistributedEnv env;
  ASSERT_NO_FATAL_FAILURE(RankOneOfTwoAtALoopbackPort(/*listen=*/false, &fd, &env));
  RendezvousOptions options;
  options.timeout = absl::Seconds(3);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<Rendezvous>> rendezvous = Rendezvous::Connect(env, options);
  const absl::Duration waited = absl::Now() - start;
  close(fd);
  ASSERT_FALSE(rendezvous.ok());
  EXPECT_EQ(rendezvous.status().message(),
            absl::StrCat(
                "rendezvous: rank 1 of 2 could not reach the store at 127.0.0.1:", env.master_port,
                " (MASTER_ADDR:MASTER_PORT) within 3s: nothing listens there (is rank 0 "
                "running, and MASTER_ADDR its host?)"));
  EXPECT_GE(waited, absl::Seconds(3));
  EXPECT_LT(waited, absl::Seconds(4)) << waited;
}

// Rank 0 whose MASTER_PORT another process holds: its store's bind fails at once, so the message
// names no timeout it never waited for.
TEST(GlooCommunicatorTest, StoreHostWhosePortIsTakenFailsAtOnceNamingNoTimeout) {
  int fd = -1;
  DistributedEnv env;
  ASSERT_NO_FATAL_FAILURE(RankOneOfTwoAtALoopbackPort(/*listen=*/true, &fd, &env));
  env.rank = 0;
  RendezvousOptions options;
  options.timeout = absl::Minutes(5);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::shared_ptr<Rendezvous>> rendezvous = Rendezvous::Connect(env, options);
  const absl::Duration waited = absl::Now() - start;
  close(fd);
  ASSERT_FALSE(rendezvous.ok());
  const std::string message(rendezvous.status().message());
  EXPECT_THAT(message, ::testing::StartsWith(absl::StrCat(
                           "rendezvous: rank 0 of 2 could not host the store at 127.0.0.1:",
                           env.master_port, " (MASTER_ADDR:MASTER_PORT): ")));
  EXPECT_THAT(message, HasSubstr("EADDRINUSE")) << message;
  EXPECT_THAT(message, Not(HasSubstr("within"))) << message;
  EXPECT_LT(waited, absl::Seconds(60)) << waited;
}

// Rank 1 whose MASTER_PORT is another service's, one that takes connections and never answers:
// c10d's client would wait for the store's first answer forever; the rank ends at the timeout.
TEST(GlooCommunicatorDeathTest, ListenerThatNeverAnswersEndsTheRankAtTheTimeout) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The kernel accepts connections into the backlog; nothing reads or answers them.
  int fd = -1;
  DistributedEnv env;
  ASSERT_NO_FATAL_FAILURE(RankOneOfTwoAtALoopbackPort(/*listen=*/true, &fd, &env));
  RendezvousOptions options;
  options.timeout = absl::Seconds(2);
  const absl::Time start = absl::Now();
  EXPECT_EXIT(Rendezvous::Connect(env, options).IgnoreError(), ::testing::ExitedWithCode(1),
              // The child binds a port of its own: any port.
              "rendezvous: rank 1 of 2 could not reach the store at 127\\.0\\.0\\.1:[0-9]+ "
              "\\(MASTER_ADDR:MASTER_PORT\\) within 2s: something listens there but does not "
              "answer as a c10d store \\(is MASTER_PORT another service's port\\?\\)");
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  close(fd);
}

}  // namespace
}  // namespace titan
