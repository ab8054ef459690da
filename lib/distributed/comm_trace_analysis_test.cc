#include "lib/distributed/comm_trace_analysis.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/distributed/comm_trace.h"
#include "lib/util/file_util.h"

namespace titan {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

class DoneWork : public c10d::Work {
 public:
  bool isCompleted() override { return true; }
};

class PendingWork : public c10d::Work {
 public:
  bool isCompleted() override { return false; }
};

// Rank `rank`'s recorder of 64 operations, dumping into `folder`.
absl::StatusOr<std::shared_ptr<CommTrace>> TestTrace(const std::string& folder, int rank) {
  CommTraceOptions options;
  options.buffer_size = 64;
  options.folder = folder;
  options.rank = rank;
  return CommTrace::Create(options);
}

// Writes rank `rank`'s dump into `folder`: `ops` (group, op name, elements) in order.
// The last `pending` operations are still running (issued, not completed).
void WriteDump(const std::string& folder, int rank,
               const std::vector<std::tuple<std::string, std::string, int>>& ops,
               const std::string& run_id = "run", std::vector<int> world = {0, 1, 2, 3},
               int pending = 0) {
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = TestTrace(folder, rank);
  ASSERT_TRUE(trace.ok()) << trace.status();
  (*trace)->SetRunId(run_id);
  std::map<std::string, std::shared_ptr<TraceGroup>> groups = {
      {"world", (*trace)->AddGroup("world", world, "gloo")},
      {"pair", (*trace)->AddGroup("pair", {0, 1}, "gloo")}};
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto& [group, op, elements] = ops[i];
    at::Tensor tensor = at::zeros({elements});
    TraceGroup* traced = groups[group].get();
    if (i + static_cast<size_t>(pending) >= ops.size()) {
      (*trace)->Record(traced, op, false, {tensor}, {tensor}, c10::make_intrusive<PendingWork>(),
                       absl::Seconds(1));
      continue;
    }
    (*trace)->Retire(traced,
                     (*trace)->Record(traced, op, false, {tensor}, {tensor},
                                      c10::make_intrusive<DoneWork>(), absl::Seconds(1)),
                     true);
  }
  ASSERT_TRUE((*trace)->Dump("test").ok());
}

// Rank 1's dump (an earlier SIGUSR1's, the rank dead since) lacks rank 0's third all_reduce,
// which rank 0 issued after that dump was written (still running), or which completed (so rank 1
// issued it too, after its dump): inconclusive, not "never issued by rank 1".
TEST(CommTraceAnalysisTest, ADumpOlderThanACollectiveIsInconclusiveNotAMismatch) {
  const std::vector<std::tuple<std::string, std::string, int>> two = {{"world", "all_reduce", 16},
                                                                      {"world", "all_reduce", 16}};
  const std::vector<std::tuple<std::string, std::string, int>> three = {
      {"world", "all_reduce", 16}, {"world", "all_reduce", 16}, {"world", "all_reduce", 16}};
  for (const bool completed : {false, true}) {
    const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/older_", completed);
    std::filesystem::remove_all(folder);
    if (completed) {
      WriteDump(folder, 0, three, "run", {0, 1});  // before rank 1's dump: no time tells
      WriteDump(folder, 1, two, "run", {0, 1});
    } else {
      WriteDump(folder, 1, two, "run", {0, 1});
      WriteDump(folder, 0, three, "run", {0, 1}, /*pending=*/1);
    }
    absl::StatusOr<CommTraceVerdict> verdict = AnalyzeCommTraces(folder);
    ASSERT_TRUE(verdict.ok()) << verdict.status();
    EXPECT_TRUE(verdict->mismatches.empty()) << completed;
    ASSERT_EQ(verdict->inconclusive.size(), 1u) << completed;
    EXPECT_TRUE(verdict->inconclusive[0].older_dumps);
    EXPECT_THAT(verdict->inconclusive[0].missing_dumps, ElementsAre(1));
    EXPECT_EQ(verdict->inconclusive[0].last_seq, 3);
    EXPECT_EQ(CommTraceExitStatus(*verdict), 3);
    EXPECT_THAT(
        FormatCommTraceVerdict(*verdict),
        HasSubstr(absl::StrCat("group world (ranks 0,1): inconclusive, ranks 1 dumped before "
                               "ranks 0 issued collective #3 nccl:all_reduce (",
                               completed ? "completed" : "scheduled", ")")));
  }
}

TEST(CommTraceAnalysisTest, NamesTheMissingRankAndTheDisagreement) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/analysis");
  std::filesystem::remove_all(folder);
  // Rank 2 never issues the world's third all_reduce; rank 1 broadcasts 8 elements where rank 0
  // broadcasts 4.
  // The others' third all_reduce waits for rank 2 (scheduled, not completed).
  WriteDump(folder, 0,
            {{"world", "all_reduce", 16},
             {"pair", "broadcast", 4},
             {"world", "all_reduce", 16},
             {"world", "all_reduce", 16}},
            "run", {0, 1, 2, 3}, /*pending=*/1);
  WriteDump(folder, 1,
            {{"world", "all_reduce", 16},
             {"pair", "broadcast", 8},
             {"world", "all_reduce", 16},
             {"world", "all_reduce", 16}},
            "run", {0, 1, 2, 3}, /*pending=*/1);
  WriteDump(folder, 2, {{"world", "all_reduce", 16}, {"world", "all_reduce", 16}});
  WriteDump(folder, 3,
            {{"world", "all_reduce", 16}, {"world", "all_reduce", 16}, {"world", "all_reduce", 16}},
            "run", {0, 1, 2, 3}, /*pending=*/1);
  absl::StatusOr<CommTraceVerdict> verdict = AnalyzeCommTraces(folder);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_THAT(verdict->ranks, ElementsAre(0, 1, 2, 3));
  EXPECT_TRUE(verdict->missing_dumps.empty());
  ASSERT_EQ(verdict->mismatches.size(), 2u);
  const CollectiveMismatch& pair = verdict->mismatches[0];
  EXPECT_EQ(pair.group, "pair");
  EXPECT_EQ(pair.collective_seq, 1);
  EXPECT_TRUE(pair.missing_ranks.empty());
  EXPECT_THAT(pair.detail, HasSubstr("sizes differ: rank 1 [[8]]"));
  const CollectiveMismatch& world = verdict->mismatches[1];
  EXPECT_EQ(world.group, "world");
  EXPECT_EQ(world.collective_seq, 3);
  EXPECT_EQ(world.op, "nccl:all_reduce");
  EXPECT_EQ(world.state, "scheduled");
  EXPECT_THAT(world.missing_ranks, ElementsAre(2));
  const std::string text = FormatCommTraceVerdict(*verdict);
  std::cout << text;
  EXPECT_THAT(text, HasSubstr("group world (ranks 0,1,2,3): collective #3 nccl:all_reduce (input "
                              "sizes [[16]], scheduled) never issued by ranks 2"));

  // Per group and rank: pair (ranks 0, 1) then world (0-3); rank 2 stopped at #2 of world.
  ASSERT_EQ(verdict->progress.size(), 6u);
  const RankProgress& stuck = verdict->progress[4];
  EXPECT_EQ(stuck.group, "world");
  EXPECT_EQ(stuck.rank, 2);
  EXPECT_EQ(stuck.last_seq, 2);
  EXPECT_EQ(stuck.last_completed, 2);
  EXPECT_EQ(verdict->progress[5].last_seq, 3);
  EXPECT_EQ(verdict->progress[0].group, "pair");
  EXPECT_EQ(verdict->progress[0].last_op, "nccl:broadcast");
  const std::string table = FormatCommTraceProgress(*verdict);
  std::cout << table;
  EXPECT_THAT(table, HasSubstr("<- missing"));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 7);  // a header and 6 rows
  EXPECT_THAT(table,
              ::testing::ContainsRegex("world +2 +2 nccl:all_reduce +completed +2  <- missing"));

  std::filesystem::remove(absl::StrCat(folder, "/rank_3"));
  verdict = AnalyzeCommTraces(folder);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_THAT(verdict->missing_dumps, ElementsAre(3));
}

// A member without a dump (stopped, dead) makes its groups' verdict inconclusive, naming it and
// where the others stopped; it never reads as agreement.
TEST(CommTraceAnalysisTest, AMissingDumpIsInconclusiveNotAgreement) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/missing");
  WriteDump(folder, 0, {{"pair", "all_reduce", 16}, {"pair", "_reduce_scatter_base", 8}});
  absl::StatusOr<CommTraceVerdict> verdict = AnalyzeCommTraces(folder);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_FALSE(verdict->all_clear());
  EXPECT_TRUE(verdict->mismatches.empty());
  ASSERT_EQ(verdict->inconclusive.size(), 1u);  // world recorded nothing: no line for it
  const InconclusiveGroup& pair = verdict->inconclusive[0];
  EXPECT_EQ(pair.group, "pair");
  EXPECT_THAT(pair.missing_dumps, ElementsAre(1));
  EXPECT_EQ(pair.last_seq, 2);
  EXPECT_EQ(pair.last_op, "nccl:_reduce_scatter_base");
  EXPECT_THAT(pair.last_ranks, ElementsAre(0));
  const std::string text = FormatCommTraceVerdict(*verdict);
  std::cout << text;
  EXPECT_THAT(text, Not(HasSubstr("issued the same collectives")));
  EXPECT_THAT(text, HasSubstr("group pair (ranks 0,1): inconclusive, no dump from ranks 1 "
                              "(suspects: stuck, stopped or dead); ranks 0 last issued "
                              "collective #2 nccl:_reduce_scatter_base (completed)"));
}

// Collectives issued without waiting (FSDP's, say) queue behind the one a member without a dump
// never joined: the oldest not completed is where the group waits, not the newest issued.
TEST(CommTraceAnalysisTest, AnInconclusiveGroupNamesTheOldestCollectiveNotCompleted) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/queued");
  std::filesystem::remove_all(folder);
  const std::vector<std::tuple<std::string, std::string, int>> ops = {{"world", "all_reduce", 16},
                                                                      {"world", "all_reduce", 16},
                                                                      {"world", "broadcast", 8},
                                                                      {"world", "all_reduce", 8}};
  for (int rank : {0, 1}) WriteDump(folder, rank, ops, "run", {0, 1, 2}, /*pending=*/3);
  absl::StatusOr<CommTraceVerdict> verdict = AnalyzeCommTraces(folder);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_TRUE(verdict->mismatches.empty());
  EXPECT_EQ(CommTraceExitStatus(*verdict), 3);
  ASSERT_EQ(verdict->inconclusive.size(), 1u);
  const InconclusiveGroup& world = verdict->inconclusive[0];
  EXPECT_THAT(world.missing_dumps, ElementsAre(2));
  EXPECT_EQ(world.stuck_seq, 2);
  EXPECT_EQ(world.stuck_op, "nccl:all_reduce");
  EXPECT_THAT(world.stuck_ranks, ElementsAre(0, 1));
  EXPECT_EQ(world.last_seq, 4);
  EXPECT_EQ(verdict->progress[0].first_pending, 2);
  const std::string text = FormatCommTraceVerdict(*verdict);
  std::cout << text;
  EXPECT_THAT(text, HasSubstr("group world (ranks 0,1,2): inconclusive, no dump from ranks 2 "
                              "(suspects: stuck, stopped or dead); ranks 0,1 wait in collective #2 "
                              "nccl:all_reduce (scheduled), the oldest they did not complete "
                              "(newest issued: #4 nccl:all_reduce)"));
}

// An earlier run's dumps left beside this one's are refused, by run id or by group membership.
TEST(CommTraceAnalysisTest, RefusesDumpsOfDifferentRuns) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/runs");
  WriteDump(folder, 0, {{"pair", "all_reduce", 16}}, "new");
  WriteDump(folder, 1, {{"pair", "all_reduce", 16}}, "old");
  EXPECT_EQ(AnalyzeCommTraces(folder).status().message(),
            folder + "/rank_0 (run new) and " + folder +
                "/rank_1 (run old) come from different runs; analyse one run's dumps alone");

  const std::string members = absl::StrCat(std::getenv("TEST_TMPDIR"), "/members");
  WriteDump(members, 0, {{"world", "all_reduce", 16}}, "", {0, 1});
  WriteDump(members, 3, {{"world", "all_reduce", 16}}, "", {0, 1, 2, 3});
  EXPECT_EQ(AnalyzeCommTraces(members).status().message(),
            members + "/rank_0 and " + members +
                "/rank_3 disagree on group world's ranks ([0,1] vs [0,1,2,3]): dumps of "
                "different jobs; analyse one job's dumps alone");
}

// A dump under another rank's name is refused, naming whose it is: the world group, which holds
// every rank, proves nothing (a hung rank 1 leaves no dump; rank 0's copied as rank 1's).
TEST(CommTraceAnalysisTest, RefusesADumpUnderAnotherRanksName) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/foreign");
  std::filesystem::remove_all(folder);
  WriteDump(folder, 0, {{"world", "all_reduce", 16}}, "run", {0, 1});
  std::filesystem::copy_file(folder + "/rank_0", folder + "/rank_1");
  EXPECT_EQ(AnalyzeCommTraces(folder).status().message(),
            folder +
                "/rank_1: rank 0's dump (its \"rank\" key says so), not rank 1's as its file "
                "name says");

  const std::string job = absl::StrCat(std::getenv("TEST_TMPDIR"), "/foreign4");
  for (int rank = 0; rank < 4; ++rank) WriteDump(job, rank, {{"world", "all_reduce", 16}});
  ASSERT_TRUE(AnalyzeCommTraces(job).ok());
  std::filesystem::copy_file(job + "/rank_1", job + "/rank_5");
  EXPECT_EQ(AnalyzeCommTraces(job).status().message(),
            job +
                "/rank_5: rank 1's dump (its \"rank\" key says so), not rank 5's as its file "
                "name says");
}

// Rank `rank`'s dump as c10d writes it, with no "rank" key: `groups` (name, ranks) are the groups
// it is a member of.
void WriteUnkeyedDump(const std::string& folder, int rank,
                      const std::vector<std::pair<std::string, std::vector<int>>>& groups) {
  absl::StatusOr<std::shared_ptr<CommTrace>> trace = TestTrace(folder, rank);
  ASSERT_TRUE(trace.ok()) << trace.status();
  for (const auto& [name, ranks] : groups) (*trace)->AddGroup(name, ranks, "gloo");
  ASSERT_TRUE((*trace)->Dump("test").ok());
  const std::string path = absl::StrCat(folder, "/rank_", rank);
  const std::string bytes = *ReadFile(path);
  c10::impl::GenericDict root = torch::jit::unpickle(bytes.data(), bytes.size()).toGenericDict();
  ASSERT_EQ(root.erase("rank"), 1u);
  const std::vector<char> pickle = torch::jit::pickle(root);
  ASSERT_TRUE(WriteFileAtomically(path, std::string(pickle.begin(), pickle.end())).ok());
}

// Without a "rank" key, every group a dump records must hold its file's rank, not just one: a rank
// records only its own groups, and groups of one (tp, cp, pp here) name it.
TEST(CommTraceAnalysisTest, RefusesAnUnkeyedDumpMissingFromOneOfItsGroups) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/unkeyed");
  std::filesystem::remove_all(folder);
  for (int rank = 0; rank < 2; ++rank) {
    WriteUnkeyedDump(folder, rank, {{"world", {0, 1}}, {absl::StrCat("tp/", rank), {rank}}});
  }
  ASSERT_TRUE(AnalyzeCommTraces(folder).ok());
  std::filesystem::copy_file(folder + "/rank_0", folder + "/rank_1",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(AnalyzeCommTraces(folder).status().message(),
            folder +
                "/rank_1: rank 1 is not in group tp/0 (ranks 0) it records: it seems to be "
                "rank 0's dump");
}

// LibTorch's unpickler reads protocol 2 only; another is named by its number.
TEST(CommTraceAnalysisTest, NamesAnotherPickleProtocolByNumber) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/protocol");
  std::filesystem::remove_all(folder);
  WriteDump(folder, 0, {{"world", "all_reduce", 16}});
  const std::string path = folder + "/rank_0";
  std::string bytes = *ReadFile(path);
  ASSERT_EQ(bytes.substr(0, 2), std::string("\x80\x02"));
  bytes[1] = 4;
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
  EXPECT_EQ(AnalyzeCommTraces(folder).status().message(),
            path +
                ": pickle protocol 4, expected 2 (what c10d writes; re-pickle with "
                "pickle.dump(..., protocol=2))");
}

// Rewrites the pickle at `path` as `root`.
void WritePickle(const std::string& path, const c10::IValue& root) {
  const std::vector<char> pickle = torch::jit::pickle(root);
  ASSERT_TRUE(WriteFileAtomically(path, std::string(pickle.begin(), pickle.end())).ok());
}

// A list of `items`, as the unpickler reads a Python list.
c10::impl::GenericList ListOf(const std::vector<c10::IValue>& items) {
  c10::impl::GenericList list(c10::AnyType::get());
  for (const c10::IValue& item : items) list.push_back(item);
  return list;
}

// A damaged dump names the file, the field, what it holds and what was expected; never LibTorch's
// internal assertion ("please report a bug to PyTorch").
TEST(CommTraceAnalysisTest, NamesTheFieldOfAMalformedDump) {
  using Root = c10::impl::GenericDict;
  const auto entry0 = [](Root& root) { return root.at("entries").toList().get(0).toGenericDict(); };
  const auto world = [](Root& root) {
    return root.at("pg_config").toGenericDict().at("world").toGenericDict();
  };
  const std::vector<std::pair<std::function<void(Root&)>, std::string>> cases = {
      {[](Root& root) { root.insert_or_assign("run_id", int64_t{7}); },
       "field 'run_id' is an int, expected a string"},
      {[](Root& root) { root.insert_or_assign("rank", "0"); },
       "field 'rank' is a string, expected an int"},
      {[](Root& root) { root.insert_or_assign("dump_time_ns", 1.5); },
       "field 'dump_time_ns' is a float, expected an int"},
      {[](Root& root) { root.erase("pg_config"); }, "no field 'pg_config' (expected a dict)"},
      {[](Root& root) { root.insert_or_assign("pg_config", ListOf({})); },
       "field 'pg_config' is a list, expected a dict"},
      {[](Root& root) { root.at("pg_config").toGenericDict().insert_or_assign("world", 3.0); },
       "pg_config['world'] is a float, expected a dict"},
      {[&](Root& root) { world(root).insert_or_assign("ranks", int64_t{0}); },
       "pg_config['world']: field 'ranks' is an int, expected a string"},
      {[&](Root& root) { world(root).insert_or_assign("ranks", "0, 1"); },
       "pg_config['world']: field 'ranks' \"0, 1\": expected [r, ...]"},
      {[&](Root& root) { world(root).insert_or_assign("ranks", "[0, -1]"); },
       "pg_config['world']: field 'ranks' \"[0, -1]\": \"-1\" is no rank"},
      {[&](Root& root) { world(root).insert_or_assign("ranks", "[0, 1, 1]"); },
       "pg_config['world']: field 'ranks' \"[0, 1, 1]\": rank 1 twice"},
      {[](Root& root) {
         root.insert_or_assign("entries", Root(c10::AnyType::get(), c10::AnyType::get()));
       },
       "field 'entries' is a dict, expected a list"},
      {[](Root& root) { root.at("entries").toList().set(0, "all_reduce"); },
       "entries[0] is a string, expected a dict"},
      {[&](Root& root) { entry0(root).erase("state"); },
       "entries[0]: no field 'state' (expected a string)"},
      {[&](Root& root) { entry0(root).insert_or_assign("is_p2p", int64_t{0}); },
       "entries[0]: field 'is_p2p' is an int, expected a bool"},
      {[&](Root& root) { entry0(root).insert_or_assign("collective_seq_id", "1"); },
       "entries[0]: field 'collective_seq_id' is a string, expected an int"},
      {[&](Root& root) { entry0(root).insert_or_assign("profiling_name", c10::IValue()); },
       "entries[0]: field 'profiling_name' is None, expected a string"},
      {[&](Root& root) { entry0(root).insert_or_assign("process_group", "world"); },
       "entries[0]: field 'process_group' is a string, expected a tuple"},
      {[&](Root& root) {
         entry0(root).insert_or_assign("process_group", c10::ivalue::Tuple::create({}));
       },
       "entries[0]: field 'process_group' is an empty tuple, expected (name, description)"},
      {[&](Root& root) {
         entry0(root).insert_or_assign("process_group",
                                       c10::ivalue::Tuple::create({int64_t{0}, "desc"}));
       },
       "entries[0]: field 'process_group'[0] is an int, expected a string"},
      {[&](Root& root) { entry0(root).insert_or_assign("input_sizes", int64_t{16}); },
       "entries[0]: field 'input_sizes' is an int, expected a list"},
      {[&](Root& root) { entry0(root).insert_or_assign("output_sizes", ListOf({int64_t{16}})); },
       "entries[0]: field 'output_sizes'[0] is an int, expected a list"},
      {[&](Root& root) { entry0(root).insert_or_assign("input_sizes", ListOf({ListOf({"16"})})); },
       "entries[0]: field 'input_sizes'[0][0] is a string, expected an int"},
      {[&](Root& root) { entry0(root).erase("output_dtypes"); },
       "entries[0]: no field 'output_dtypes' (expected a list)"},
      {[&](Root& root) { entry0(root).insert_or_assign("input_dtypes", ListOf({int64_t{6}})); },
       "entries[0]: field 'input_dtypes'[0] is an int, expected a string"},
      {[&](Root& root) { entry0(root).insert_or_assign("time_created_ns", "now"); },
       "entries[0]: field 'time_created_ns' is a string, expected an int"},
      {[&](Root& root) { entry0(root).insert_or_assign("timeout_ms", 1.5); },
       "entries[0]: field 'timeout_ms' is a float, expected an int"},
  };
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/malformed");
  const std::string path = folder + "/rank_0";
  for (const auto& [damage, expected] : cases) {
    WriteDump(folder, 0, {{"world", "all_reduce", 16}});
    const std::string bytes = *ReadFile(path);
    Root root = torch::jit::unpickle(bytes.data(), bytes.size()).toGenericDict();
    damage(root);
    WritePickle(path, root);
    EXPECT_EQ(std::string(AnalyzeCommTraces(folder).status().message()),
              absl::StrCat(path, ": ", expected));
  }

  WritePickle(path, ListOf({int64_t{1}}));
  EXPECT_EQ(std::string(AnalyzeCommTraces(folder).status().message()),
            path + ": not a flight-recorder dump: the top level is a list, expected a dict");
  ASSERT_TRUE(WriteFileAtomically(path, "\x80\x02garbage").ok());
  const std::string garbage(AnalyzeCommTraces(folder).status().message());
  EXPECT_THAT(garbage, ::testing::StartsWith(path + ": not a flight-recorder dump: "));
  EXPECT_THAT(garbage, Not(HasSubstr("report a bug")));
}

// Members that issued a collective alike but for its dtypes disagree, as fr_trace's
// COLLECTIVE_DTYPE_MISMATCH: the rank and the collective are named.
TEST(CommTraceAnalysisTest, NamesADtypeMismatch) {
  using Root = c10::impl::GenericDict;
  for (const std::string field : {"input_dtypes", "output_dtypes"}) {
    const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", field);
    std::filesystem::remove_all(folder);
    for (int rank = 0; rank < 2; ++rank) {
      WriteDump(folder, rank, {{"pair", "all_reduce", 16}, {"pair", "all_reduce", 16}});
    }
    const std::string path = folder + "/rank_1";
    const std::string bytes = *ReadFile(path);
    Root root = torch::jit::unpickle(bytes.data(), bytes.size()).toGenericDict();
    root.at("entries").toList().get(1).toGenericDict().insert_or_assign(field,
                                                                        ListOf({"BFloat16"}));
    WritePickle(path, root);
    absl::StatusOr<CommTraceVerdict> verdict = AnalyzeCommTraces(folder);
    ASSERT_TRUE(verdict.ok()) << verdict.status();
    ASSERT_EQ(verdict->mismatches.size(), 1u) << field;
    EXPECT_EQ(verdict->mismatches[0].collective_seq, 2);
    EXPECT_EQ(CommTraceExitStatus(*verdict), 2);
    EXPECT_THAT(FormatCommTraceVerdict(*verdict),
                HasSubstr(absl::StrCat(
                    "group pair (ranks 0,1): collective #2 nccl:all_reduce (input sizes [[16]], "
                    "completed) dtypes differ: rank 1 ",
                    field == "input_dtypes" ? "[BFloat16] -> [Float]" : "[Float] -> [BFloat16]",
                    ", rank 0 [Float] -> [Float]")))
        << field;
  }
}

// c10d's Gloo dumps list no group in pg_config but '' (ranks "[]") while their entries name groups
// '0' and '1': collectives of a group whose members are unknown are refused, never said to agree.
TEST(CommTraceAnalysisTest, RefusesEntriesOfAGroupWithoutMembers) {
  using Root = c10::impl::GenericDict;
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/unlisted");
  std::filesystem::remove_all(folder);
  const std::string path = folder + "/rank_1";
  for (const std::string& listed : {std::string("world"), std::string("")}) {
    for (int rank = 0; rank < 2; ++rank) {
      WriteDump(folder, rank, {{"world", "all_reduce", 16}}, "run", {0, 1});
    }
    ASSERT_TRUE(AnalyzeCommTraces(folder).ok());
    const std::string bytes = *ReadFile(path);
    Root root = torch::jit::unpickle(bytes.data(), bytes.size()).toGenericDict();
    Root group(c10::StringType::get(), c10::AnyType::get());
    group.insert("name", listed);
    group.insert("desc", "");
    group.insert("ranks", "[]");
    Root config(c10::StringType::get(), c10::AnyType::get());
    config.insert(listed, group);
    root.insert_or_assign("pg_config", config);
    WritePickle(path, root);
    EXPECT_EQ(
        std::string(AnalyzeCommTraces(folder).status().message()),
        absl::StrCat(path, ": entries of group 'world', which its pg_config ",
                     listed.empty() ? "does not list" : "gives no ranks", " (it lists '", listed,
                     "' []): the group's members are unknown, its collectives cannot be "
                     "checked"));
  }
}

// A rank stopped (SIGSTOP) before a collective and continued after the others' timeout issues it,
// and dumps, late: every dump records it, none completed, but the late rank is the stall.
TEST(CommTraceAnalysisTest, NamesAMemberThatIssuedACollectiveAfterTheOthersTimeout) {
  using Root = c10::impl::GenericDict;
  const std::vector<std::tuple<std::string, std::string, int>> ops = {{"world", "all_reduce", 16},
                                                                      {"world", "all_reduce", 16}};
  // Rank 2's second all_reduce `late_ns` after rank 0's; each waits 1 s (WriteDump's timeout).
  for (const int64_t late_ns : {int64_t{500000000}, int64_t{2500000000}}) {
    const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/late_", late_ns);
    std::filesystem::remove_all(folder);
    for (int rank = 0; rank < 3; ++rank) {
      WriteDump(folder, rank, ops, "run", {0, 1, 2}, /*pending=*/1);
    }
    const auto last_created = [&](int rank) {
      const std::string bytes = *ReadFile(absl::StrCat(folder, "/rank_", rank));
      Root root = torch::jit::unpickle(bytes.data(), bytes.size()).toGenericDict();
      return root.at("entries").toList().get(1).toGenericDict().at("time_created_ns").toInt();
    };
    const int64_t first_ns = std::min(last_created(0), last_created(1));
    const std::string path = folder + "/rank_2";
    const std::string bytes = *ReadFile(path);
    Root root = torch::jit::unpickle(bytes.data(), bytes.size()).toGenericDict();
    Root entry = root.at("entries").toList().get(1).toGenericDict();
    ASSERT_EQ(entry.at("timeout_ms").toInt(), 1000);
    entry.insert_or_assign("time_created_ns", first_ns + late_ns);
    root.insert_or_assign("dump_time_ns", first_ns + late_ns + 1000000);
    WritePickle(path, root);
    absl::StatusOr<CommTraceVerdict> verdict = AnalyzeCommTraces(folder);
    ASSERT_TRUE(verdict.ok()) << verdict.status();
    const std::string text = FormatCommTraceVerdict(*verdict);
    std::cout << text;
    if (late_ns < 1000000000) {
      EXPECT_TRUE(verdict->all_clear()) << text;  // within the timeout: merely behind
      continue;
    }
    ASSERT_EQ(verdict->mismatches.size(), 1u);
    const CollectiveMismatch& world = verdict->mismatches[0];
    EXPECT_EQ(world.collective_seq, 2);
    EXPECT_TRUE(world.missing_ranks.empty());
    EXPECT_THAT(world.late_ranks, ElementsAre(2));
    EXPECT_EQ(CommTraceExitStatus(*verdict), 2);
    EXPECT_THAT(text,
                ::testing::ContainsRegex(
                    "group world \\(ranks 0,1,2\\): collective #2 nccl:all_reduce \\(input "
                    "sizes \\[\\[16\\]\\], scheduled\\) ranks 2 issued it 2.5 s after rank [01], "
                    "past rank [01]'s 1.0 s timeout: they came after the others had given up "
                    "\\(stalled before it: stopped, as by SIGSTOP, or stuck\\)"));
    EXPECT_THAT(FormatCommTraceProgress(*verdict),
                ::testing::ContainsRegex("world +2 +2 nccl:all_reduce +scheduled +1  <- late"));
  }
}

// A rank stopped (SIGSTOP) inside a collective, continued after the others timed out: every
// member issued it in time and none completed it, so the dumps, written past the timeout, show
// a stall no member is missing from; never agreement.
TEST(CommTraceAnalysisTest, ACollectiveOpenPastItsTimeoutEverywhereIsInconclusive) {
  using Root = c10::impl::GenericDict;
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/open");
  std::filesystem::remove_all(folder);
  for (int rank = 0; rank < 3; ++rank) {
    WriteDump(folder, rank, {{"world", "all_reduce", 16}, {"world", "all_reduce", 16}}, "run",
              {0, 1, 2}, /*pending=*/1);
  }
  ASSERT_TRUE(AnalyzeCommTraces(folder)->all_clear());  // a snapshot within the 1 s timeout
  for (int rank = 0; rank < 3; ++rank) {
    const std::string path = absl::StrCat(folder, "/rank_", rank);
    const std::string bytes = *ReadFile(path);
    Root root = torch::jit::unpickle(bytes.data(), bytes.size()).toGenericDict();
    const int64_t created =
        root.at("entries").toList().get(1).toGenericDict().at("time_created_ns").toInt();
    root.insert_or_assign("dump_time_ns", created + (rank == 2 ? 500000000 : 1500000000));
    WritePickle(path, root);
  }
  absl::StatusOr<CommTraceVerdict> verdict = AnalyzeCommTraces(folder);
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_TRUE(verdict->mismatches.empty());
  ASSERT_EQ(verdict->timed_out.size(), 1u);
  EXPECT_EQ(verdict->timed_out[0].collective_seq, 2);
  EXPECT_THAT(verdict->timed_out[0].open_ranks, ElementsAre(0, 1));
  EXPECT_EQ(CommTraceExitStatus(*verdict), 3);
  const std::string text = FormatCommTraceVerdict(*verdict);
  std::cout << text;
  EXPECT_THAT(text, Not(HasSubstr("issued the same collectives")));
  EXPECT_THAT(text, HasSubstr("group world (ranks 0,1,2): inconclusive, every member issued "
                              "collective #2 nccl:all_reduce (input sizes [[16]], scheduled) and "
                              "none completed it: ranks 0,1 dumped it still open past its 1.0 s "
                              "timeout; no member is missing, so a member stalled inside it"));
}

TEST(CommTraceAnalysisTest, AnEmptyFolderIsAnError) {
  const std::string folder = absl::StrCat(std::getenv("TEST_TMPDIR"), "/empty");
  std::filesystem::create_directories(folder);
  EXPECT_THAT(AnalyzeCommTraces(folder).status().message(), HasSubstr("no dumps named rank_"));
}

}  // namespace
}  // namespace titan
