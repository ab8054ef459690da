#include "lib/distributed/comm_trace.h"

#include <ATen/ATen.h>
#include <signal.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <limits>
#include <string>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/util/c10_log_filter.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

// A Work whose completion the test decides.
class FakeWork : public c10d::Work {
 public:
  explicit FakeWork(bool done) : done_(done) {}
  bool isCompleted() override { return done_; }

 private:
  const bool done_;
};

std::string TestFolder(const std::string& name) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::filesystem::remove_all(folder);
  return folder;
}

c10::impl::GenericDict LoadDump(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  const std::string data = bytes.ok() ? *bytes : std::string();
  return torch::jit::unpickle(data.data(), data.size()).toGenericDict();
}

TEST(CommTraceTest, KeepsTheNewestEntriesWithSequenceNumbersSizesAndStates) {
  CommTraceOptions options;
  options.buffer_size = 3;
  options.folder = TestFolder("ring");
  options.rank = 1;
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  std::shared_ptr<TraceGroup> group = (*trace)->AddGroup("gloo:dp/0", {0, 1}, "gloo");
  std::vector<TraceId> ids;
  for (int i = 0; i < 5; ++i) {
    at::Tensor tensor = at::zeros({2, i + 1});
    // The last operation is still running at the dump.
    ids.push_back((*trace)->Record(group.get(), "all_reduce", /*p2p=*/false, {tensor}, {tensor},
                                   c10::make_intrusive<FakeWork>(i < 4), absl::Seconds(7)));
    if (i < 4) (*trace)->Retire(group.get(), ids.back(), /*ok=*/true);
  }
  at::Tensor sent = at::zeros({4});
  (*trace)->Retire(group.get(),
                   (*trace)->Record(group.get(), "send 1->0", /*p2p=*/true, {sent}, {sent},
                                    c10::make_intrusive<FakeWork>(true), absl::Seconds(7)),
                   true);
  ASSERT_TRUE((*trace)->Dump("test").ok());

  const auto dump = LoadDump(absl::StrCat(options.folder, "/rank_1"));
  EXPECT_EQ(dump.at("version").toStringRef(), "2.10");
  const auto pg = dump.at("pg_config").toGenericDict().at("gloo:dp/0").toGenericDict();
  EXPECT_EQ(pg.at("ranks").toStringRef(), "[0, 1]");
  const auto entries = dump.at("entries").toList();
  ASSERT_EQ(entries.size(), 3u);
  const int64_t kRecord[] = {3, 4, 5};
  const int64_t kCollectiveSeq[] = {4, 5, 5};
  const char* kName[] = {"nccl:all_reduce", "nccl:all_reduce", "nccl:send 1->0"};
  const char* kState[] = {"completed", "scheduled", "completed"};
  for (size_t i = 0; i < 3; ++i) {
    const auto entry = entries.get(i).toGenericDict();
    SCOPED_TRACE(i);
    EXPECT_EQ(entry.at("record_id").toInt(), kRecord[i]);
    EXPECT_EQ(entry.at("collective_seq_id").toInt(), kCollectiveSeq[i]);
    EXPECT_EQ(entry.at("p2p_seq_id").toInt(), i == 2 ? 1 : 0);
    EXPECT_EQ(entry.at("profiling_name").toStringRef(), kName[i]);
    EXPECT_EQ(entry.at("state").toStringRef(), kState[i]);
    EXPECT_EQ(entry.at("retired").toBool(), i != 1);
    EXPECT_EQ(entry.at("timeout_ms").toInt(), 7000);
    const std::vector<int64_t> expected =
        i == 2 ? std::vector<int64_t>{4} : std::vector<int64_t>{2, static_cast<int64_t>(i) + 4};
    std::vector<int64_t> sizes;
    for (const c10::IValue& size : entry.at("input_sizes").toList().get(0).toListRef()) {
      sizes.push_back(size.toInt());
    }
    EXPECT_EQ(sizes, expected);
  }
}

// A successful wait completes the entry even where the Work never says so (ProcessGroupGloo's
// reduce-scatter), and pg_status counts an operation's own number, never a failed one.
TEST(CommTraceTest, WaitedOperationsCompleteAndPgStatusStopsBeforeAFailure) {
  CommTraceOptions options;
  options.buffer_size = 8;
  options.folder = TestFolder("pg_status");
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  std::shared_ptr<TraceGroup> group = (*trace)->AddGroup("gloo:dp/0", {0}, "gloo");
  at::Tensor tensor = at::zeros({2});
  std::vector<TraceId> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back((*trace)->Record(group.get(), "_reduce_scatter_base", /*p2p=*/false, {tensor},
                                   {tensor}, c10::make_intrusive<FakeWork>(false),
                                   absl::Seconds(7)));
  }
  (*trace)->Retire(group.get(), ids[0], /*ok=*/true);  // while #2 to #4 are in flight
  (*trace)->Fail(group.get(), ids[2]);
  (*trace)->Retire(group.get(), ids[1], /*ok=*/true);
  (*trace)->Retire(group.get(), ids[3], /*ok=*/true);  // after #3 failed
  ASSERT_TRUE((*trace)->Dump("test").ok());

  const auto dump = LoadDump(absl::StrCat(options.folder, "/rank_0"));
  const auto entries = dump.at("entries").toList();
  ASSERT_EQ(entries.size(), 4u);
  const char* kState[] = {"completed", "completed", "scheduled", "completed"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(entries.get(i).toGenericDict().at("state").toStringRef(), kState[i]) << i;
  }
  const auto status = dump.at("pg_status").toGenericDict().at("0").toGenericDict();
  EXPECT_EQ(status.at("last_enqueued_collective").toInt(), 4);
  EXPECT_EQ(status.at("last_completed_collective").toInt(), 2);
}

// An operation the backend finished reads completed before its wait returns, in its entry and in
// pg_status alike (c10d's watchdog counts it so).
TEST(CommTraceTest, PgStatusCountsWhatTheEntriesCallCompleted) {
  CommTraceOptions options;
  options.buffer_size = 8;
  options.folder = TestFolder("pg_status_unwaited");
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  std::shared_ptr<TraceGroup> group = (*trace)->AddGroup("gloo:dp/0", {0}, "gloo");
  at::Tensor tensor = at::zeros({2});
  const TraceId first =
      (*trace)->Record(group.get(), "allreduce", /*p2p=*/false, {tensor}, {tensor},
                       c10::make_intrusive<FakeWork>(true), absl::Seconds(7));
  (*trace)->Retire(group.get(), first, /*ok=*/true);
  // Finished by the backend, not yet waited on; then one still running.
  (*trace)->Record(group.get(), "allreduce", /*p2p=*/false, {tensor}, {tensor},
                   c10::make_intrusive<FakeWork>(true), absl::Seconds(7));
  (*trace)->Record(group.get(), "allreduce", /*p2p=*/false, {tensor}, {tensor},
                   c10::make_intrusive<FakeWork>(false), absl::Seconds(7));
  ASSERT_TRUE((*trace)->Dump("test").ok());

  const auto dump = LoadDump(absl::StrCat(options.folder, "/rank_0"));
  const auto entries = dump.at("entries").toList();
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries.get(1).toGenericDict().at("state").toStringRef(), "completed");
  EXPECT_EQ(entries.get(2).toGenericDict().at("state").toStringRef(), "scheduled");
  const auto status = dump.at("pg_status").toGenericDict().at("0").toGenericDict();
  EXPECT_EQ(status.at("last_completed_collective").toInt(), 2);
}

// The ring costs memory as operations fill it, not up front: a 2^31 - 1 entry one is cheap to make.
TEST(CommTraceTest, AHugeRingGrowsAsItFills) {
  CommTraceOptions options;
  options.buffer_size = std::numeric_limits<int>::max();
  options.folder = TestFolder("huge");
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  std::shared_ptr<TraceGroup> group = (*trace)->AddGroup("gloo:dp/0", {0}, "gloo");
  at::Tensor tensor = at::zeros({2});
  (*trace)->Retire(group.get(),
                   (*trace)->Record(group.get(), "all_reduce", /*p2p=*/false, {tensor}, {tensor},
                                    c10::make_intrusive<FakeWork>(true), absl::Seconds(7)),
                   /*ok=*/true);
  ASSERT_TRUE((*trace)->Dump("test").ok());
  EXPECT_EQ(LoadDump(absl::StrCat(options.folder, "/rank_0")).at("entries").toList().size(), 1u);
}

// A rerun in the same folder sets the earlier run's dumps aside (rank 0 does, for every rank) and
// marks its own with its run id.
TEST(CommTraceTest, StartRunSetsEarlierDumpsAsideAndMarksNewOnes) {
  CommTraceOptions options;
  options.buffer_size = 4;
  options.folder = TestFolder("rerun");
  std::filesystem::create_directories(options.folder);
  for (const char* name : {"rank_0", "rank_1", "rank_3", "notes.txt"}) {
    ASSERT_TRUE(WriteFileAtomically(absl::StrCat(options.folder, "/", name), "old").ok());
  }
  options.rank = 1;
  absl::StatusOr<std::shared_ptr<CommTrace>> peer = CommTrace::Create(options);
  ASSERT_TRUE(peer.ok()) << peer.status();
  ASSERT_TRUE((*peer)->StartRun("42").ok());
  EXPECT_TRUE(std::filesystem::exists(options.folder + "/rank_1"));  // only rank 0 moves them

  options.rank = 0;
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_TRUE((*trace)->StartRun("42").ok());
  for (const char* name : {"rank_0", "rank_1", "rank_3"}) {
    EXPECT_FALSE(std::filesystem::exists(absl::StrCat(options.folder, "/", name))) << name;
    EXPECT_EQ(*ReadFile(absl::StrCat(options.folder, ".earlier-42/", name)), "old") << name;
  }
  EXPECT_TRUE(std::filesystem::exists(options.folder + "/notes.txt"));
  // Spelled with trailing separators and "." parts, the folder still gets a sibling.
  const std::string folder = options.folder;
  options.folder = folder + "//.//";
  ASSERT_TRUE(WriteFileAtomically(folder + "/rank_2", "older").ok());
  absl::StatusOr<std::shared_ptr<CommTrace>> spelled = CommTrace::Create(options);
  ASSERT_TRUE(spelled.ok()) << spelled.status();
  ASSERT_TRUE((*spelled)->StartRun("43").ok());
  EXPECT_EQ(*ReadFile(folder + ".earlier-43/rank_2"), "older");
  options.folder = folder;
  ASSERT_TRUE((*trace)->Dump("test").ok());
  EXPECT_EQ(LoadDump(options.folder + "/rank_0").at("run_id").toStringRef(), "42");
  EXPECT_EQ(LoadDump(options.folder + "/rank_0").at("rank").toInt(), 0);  // whose dump it is
}

TEST(CommTraceTest, SizeZeroRecordsAndWritesNothing) {
  CommTraceOptions options;
  options.buffer_size = 0;
  options.folder = TestFolder("off");
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_FALSE((*trace)->enabled());
  EXPECT_EQ((*trace)->AddGroup("g", {0}, "gloo"), nullptr);
  const TraceId id = (*trace)->Record(nullptr, "all_reduce", false, {}, {},
                                      c10::make_intrusive<FakeWork>(true), absl::Seconds(1));
  EXPECT_FALSE(id.id.has_value());
  (*trace)->DumpAllRanks("test");
  EXPECT_FALSE(std::filesystem::exists(options.folder));
}

TEST(CommTraceTest, AFailingRankGetsEveryRankToDump) {
  const std::string folder = TestFolder("peers");
  c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::shared_ptr<CommTrace>> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    CommTraceOptions options;
    options.buffer_size = 8;
    options.folder = folder;
    options.rank = rank;
    options.world_size = 3;
    options.store = store;
    absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
    ASSERT_TRUE(trace.ok()) << trace.status();
    ranks.push_back(*trace);
  }
  const absl::Time start = absl::Now();
  ranks[2]->DumpAllRanks("all_reduce timed out");
  // The other two answered through their watchers before the call returned.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(std::filesystem::exists(absl::StrCat(folder, "/rank_", rank))) << rank;
  }
}

// Rank 0 closes the store as the job ends while this rank's watcher still polls it for dump
// requests: c10d's client would log each failed poll with a C++ backtrace.
TEST(CommTraceTest, TheWatcherPollsAStoreWhoseHostEndedQuietly) {
  FilterC10LogOutput();
  c10d::TCPStoreOptions store_options;
  store_options.port = 0;
  store_options.isServer = true;
  store_options.waitWorkers = false;
  auto host = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  store_options.port = host->getPort();
  store_options.isServer = false;
  CommTraceOptions options;
  options.buffer_size = 4;
  options.folder = TestFolder("host_ended");
  options.rank = 1;
  options.world_size = 2;
  options.store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  host.reset();
  testing::internal::CaptureStderr();
  absl::SleepFor(absl::Milliseconds(1200));  // two polls or more
  trace->reset();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(CommTraceTest, SigusrOneDumps) {
  CommTraceOptions options;
  options.buffer_size = 4;
  options.folder = TestFolder("signal");
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(raise(SIGUSR1), 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!std::filesystem::exists((*trace)->DumpPath()) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(std::filesystem::exists((*trace)->DumpPath()));
}

// A request reaching a rank after training (the launcher forwards SIGUSR1 until the job ends)
// must not end it by SIGUSR1's default action.
TEST(CommTraceTest, SigusrOneIsLoggedAndIgnoredOnceTheRecorderIsGone) {
  CommTraceOptions options;
  options.buffer_size = 4;
  options.folder = TestFolder("signal_after");
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  const std::string path = (*trace)->DumpPath();
  trace->reset();
  struct sigaction current {};
  ASSERT_EQ(sigaction(SIGUSR1, nullptr, &current), 0);
  ASSERT_NE(current.sa_handler, SIG_DFL);
  testing::internal::CaptureStderr();
  ASSERT_EQ(raise(SIGUSR1), 0);
  EXPECT_THAT(testing::internal::GetCapturedStderr(),
              testing::HasSubstr("SIGUSR1: no collective flight recorder runs in this process"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(CommTraceTest, SigusrOneIsIgnoredWithTheRecorderOff) {
  CommTraceOptions options;
  options.buffer_size = 0;
  options.folder = TestFolder("signal_off");
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = CommTrace::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(raise(SIGUSR1), 0);  // its default action would end this test
  EXPECT_FALSE(std::filesystem::exists((*trace)->DumpPath()));
}

}  // namespace
}  // namespace titan
