// LaunchLocalRanks end to end: tests/distributed/fake_rank launches copies of itself.
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/distributed/subprocess.h"

namespace titan {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using ::testing::UnorderedElementsAreArray;

std::string FakeRank() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/titan/tests/distributed/fake_rank");
}

std::string RankedTool() {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/titan/tests/distributed/ranked_tool");
}

std::string OutputPrefix(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

// The state letter of /proc/<pid>/stat (R, S, T for stopped, Z for zombie), '?' when unreadable.
char ProcessState(int pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
}

bool IsZombie(int pid) { return ProcessState(pid) == 'Z'; }

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// The pid in rank `rank`'s "ready pid=P" line of fake_rank's wait mode, 0 when absent.
int ReadyRankPid(const std::string& out, int rank) {
  const std::string prefix = absl::StrCat("[rank ", rank, "] ready pid=");
  for (const std::string& line : Lines(out)) {
    if (absl::StartsWith(line, prefix)) return std::atoi(line.substr(prefix.size()).c_str());
  }
  return 0;
}

TEST(LaunchLocalRanksTest, PortIsHeldForRankZerosStoreFromThePick) {
  // The launcher keeps the free port it picked bound and hands the socket to rank 0 (its store
  // takes it over): a job starting at the same moment cannot take the port in between.
  absl::StatusOr<Subprocess> launcher =
      Subprocess::Start({FakeRank(), "--nproc_per_node=2"},
                        {{"FAKE_RANK_MODE", "port"},
                         {"FAKE_MARKER", OutputPrefix("port_checked")},
                         {"TITAN_STORE_LISTEN_FD", "99"}},
                        OutputPrefix("port"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 3) << launcher->Stderr();  // Rank 1's, after its check; rank 0 held on.
  std::vector<std::string> sorted;
  for (const std::string& line : Lines(launcher->Stdout())) {
    if (absl::StartsWith(line, "[rank ")) sorted.push_back(line);
  }
  ASSERT_EQ(sorted.size(), 2u) << launcher->Stdout();
  std::sort(sorted.begin(), sorted.end());
  // IPv4 and IPv6 both, as c10d's store listens: MASTER_ADDR may be either.
  EXPECT_THAT(sorted[0], StartsWith("[rank 0] port held on ::1 too listen_fd="));
  EXPECT_NE(sorted[0], "[rank 0] port held on ::1 too listen_fd=99");  // The launcher's own.
  EXPECT_EQ(sorted[1], "[rank 1] port held on ::1 too listen_fd=");
}

TEST(LaunchLocalRanksTest, SetsEnvironmentDropsFlagAndPrefixesEveryLine) {
  absl::StatusOr<Subprocess> launcher =
      Subprocess::Start({FakeRank(), "--nproc_per_node=3", "--steps=2"},
                        {{"FAKE_RANK_MODE", "print"}}, OutputPrefix("print"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 0) << launcher->Stderr();

  const std::vector<std::string> out = Lines(launcher->Stdout());
  ASSERT_EQ(out.size(), 3u) << launcher->Stdout();
  // Every rank sees the same free port, picked by the launcher.
  const std::string port = out[0].substr(out[0].find("127.0.0.1:") + 10,
                                         out[0].find(" args=") - out[0].find("127.0.0.1:") - 10);
  EXPECT_GT(std::atoi(port.c_str()), 0) << out[0];
  std::vector<std::string> expected_out;
  std::vector<std::string> expected_err;
  for (int rank = 0; rank < 3; ++rank) {
    expected_out.push_back(absl::StrCat("[rank ", rank, "] rank=", rank, " local_rank=", rank,
                                        " world_size=3 local_world_size=3 master=127.0.0.1:",
                                        port, " args=--steps=2"));
    expected_err.push_back(absl::StrCat("[rank ", rank, "] to stderr"));
    expected_err.push_back(absl::StrCat("[rank ", rank, "] unterminated tail"));
  }
  EXPECT_THAT(out, UnorderedElementsAreArray(expected_out));
  EXPECT_THAT(Lines(launcher->Stderr()), UnorderedElementsAreArray(expected_err));
}

TEST(LaunchLocalRanksTest, FailureLinesArePrintedLastOnceEachWithTheirRanks) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=4"}, {{"FAKE_RANK_MODE", "refuse"}, {"FAKE_FAIL_RANK", "2"}},
      OutputPrefix("refuse"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 1);
  const std::vector<std::string> err = Lines(launcher->Stderr());
  ASSERT_GE(err.size(), 4u) << launcher->Stderr();
  // A message's lines after its first stay with it, log lines apart.
  EXPECT_THAT(
      std::vector<std::string>(err.end() - 4, err.end()),
      ::testing::ElementsAre("[ranks 0-1,3] fake_rank: refused", "[ranks 0-1,3]   its cause",
                             "[rank 2] fake_rank: refused alone", "[rank 2]   its cause"))
      << launcher->Stderr();
  // Other lines pass through as they come, one per rank.
  EXPECT_THAT(err, Contains("[rank 3] log line"));
  EXPECT_THAT(err, Contains("[rank 1] I20261205 a later log line"));
  EXPECT_EQ(std::count(err.begin(), err.end(), "[rank 0] log line"), 1);
}

// A --json caller's one error line says why the first failing rank failed, not only that it did.
TEST(LaunchLocalRanksTest, TheReportedFailureQuotesTheFailingRanksLine) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=3"},
      {{"FAKE_RANK_MODE", "refuse"}, {"FAKE_FAIL_RANK", "1"}, {"FAKE_PLAIN_STDOUT_RANK", "0"}},
      OutputPrefix("quoted"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 1);
  EXPECT_EQ(launcher->Stdout(), "report: rank 1 exited with status 1: refused alone\n");
}

TEST(LaunchLocalRanksTest, PlainStdoutRankPassesItsStdoutAsIs) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"},
      {{"FAKE_RANK_MODE", "print"}, {"FAKE_PLAIN_STDOUT_RANK", "0"}}, OutputPrefix("plain"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 0) << launcher->Stderr();
  const std::vector<std::string> out = Lines(launcher->Stdout());
  ASSERT_EQ(out.size(), 2u) << launcher->Stdout();
  EXPECT_THAT(out, Contains(StartsWith("rank=0 ")));
  EXPECT_THAT(out, Contains(StartsWith("[rank 1] rank=1 ")));
  // Its stderr keeps the prefix: logs still say whose they are.
  EXPECT_THAT(launcher->Stderr(), HasSubstr("[rank 0] to stderr"));
}

TEST(LaunchLocalRanksTest, LostStdoutIsAnErrorThoughTheRanksSucceeded) {
  // The ranks write to their pipes; the launcher's own stdout is what fails.
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {"/bin/sh", "-c", absl::StrCat("exec ", FakeRank(), " --nproc_per_node=2 >/dev/full")},
      {{"FAKE_RANK_MODE", "print"}}, OutputPrefix("full"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 1) << launcher->Stderr();
  EXPECT_THAT(launcher->Stderr(), HasSubstr("stdout: write failed: No space left on device"));
}

// Rank 0's JSON line lost to a full disk (titan_rl --json >/dev/full) is said once on stderr, as
// one process says it: no failure line goes to the stdout that was lost, to be said lost again.
TEST(LaunchLocalRanksTest, LostStdoutOfARankedToolIsSaidOnceAsOneProcessSaysIt) {
  for (const std::string nproc : {"", " --nproc_per_node=2"}) {
    absl::StatusOr<Subprocess> tool = Subprocess::Start(
        {"/bin/sh", "-c", absl::StrCat("exec ", RankedTool(), nproc, " >/dev/full")}, {},
        OutputPrefix("ranked_full"));
    ASSERT_TRUE(tool.ok()) << tool.status();
    absl::StatusOr<int> status = tool->Wait(absl::Seconds(20));
    ASSERT_TRUE(status.ok()) << status.status();
    EXPECT_EQ(*status, 1) << nproc << "\n" << tool->Stderr();
    const std::vector<std::string> lines = Lines(tool->Stderr());
    EXPECT_EQ(std::count(lines.begin(), lines.end(),
                         "ranked_tool: stdout: write failed: No space left on device"),
              1)
        << nproc << "\n"
        << tool->Stderr();
  }
}

// Only the spellings the launcher reads are dropped for the ranks: another reaches their flag
// parsing, which refuses it as it would in one process.
TEST(LaunchLocalRanksTest, OtherSpellingsOfTheFlagReachTheRanks) {
  absl::StatusOr<Subprocess> launcher =
      Subprocess::Start({FakeRank(), "--nproc_per_node=2", "-nproc_per_node=3"},
                        {{"FAKE_RANK_MODE", "print"}}, OutputPrefix("single_dash"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 0) << launcher->Stderr();
  EXPECT_THAT(launcher->Stdout(), HasSubstr("[rank 1] rank=1 local_rank=1 world_size=2 "));
  EXPECT_THAT(launcher->Stdout(), HasSubstr(" args=-nproc_per_node=3\n"));
}

TEST(LaunchLocalRanksTest, SeparateValueFormOfFlagIsDroppedAndMasterPortKept) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node", "2", "x"},
      {{"FAKE_RANK_MODE", "print"}, {"MASTER_PORT", "23456"}}, OutputPrefix("separate"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 0);
  EXPECT_THAT(launcher->Stdout(), HasSubstr("[rank 1] rank=1 local_rank=1 world_size=2 "
                                            "local_world_size=2 master=127.0.0.1:23456 args=x\n"));
}

TEST(LaunchLocalRanksTest, FailingRankStopsOthersAndItsStatusIsReturned) {
  const absl::Time start = absl::Now();
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=4"},
      {{"FAKE_RANK_MODE", "fail"}, {"FAKE_FAIL_RANK", "2"}, {"FAKE_STUBBORN_RANK", "1"}},
      OutputPrefix("fail"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 3) << launcher->Stderr();
  // 200 ms until the failure, 500 ms grace before SIGKILL reaches the rank that ignores SIGTERM.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(launcher->Stderr(), HasSubstr("rank 2 exited with status 3"));
}

TEST(LaunchLocalRanksTest, ASilentPlainStdoutRankGetsTheFailureReported) {
  // Rank 0 (the --json rank) is stopped after rank 1 fails: its stdout would stay empty.
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"},
      {{"FAKE_RANK_MODE", "fail"}, {"FAKE_FAIL_RANK", "1"}, {"FAKE_PLAIN_STDOUT_RANK", "0"}},
      OutputPrefix("report"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 3) << launcher->Stderr();
  EXPECT_EQ(launcher->Stdout(), "report: rank 1 exited with status 3 (its error is on stderr)\n");
  // Without a plain rank nothing is reported: every line is a rank's.
  absl::StatusOr<Subprocess> unreported = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"}, {{"FAKE_RANK_MODE", "fail"}, {"FAKE_FAIL_RANK", "1"}},
      OutputPrefix("no_report"));
  ASSERT_TRUE(unreported.ok()) << unreported.status();
  status = unreported->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(unreported->Stdout(), "");
}

TEST(LaunchLocalRanksTest, SigtermIsForwardedToEveryRank) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"}, {{"FAKE_RANK_MODE", "wait"}}, OutputPrefix("wait"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("ready", 2, absl::Seconds(20))) << launcher->Stdout();
  kill(launcher->pid(), SIGTERM);
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 0) << launcher->Stderr();
  EXPECT_THAT(launcher->Stdout(), HasSubstr("[rank 0] rank 0 got SIGTERM"));
  EXPECT_THAT(launcher->Stdout(), HasSubstr("[rank 1] rank 1 got SIGTERM"));
}

// A hangup (the terminal or ssh session gone) stops the ranks as SIGTERM does, as torchrun's: they
// save and exit, where the launcher's default death would SIGKILL them (PR_SET_PDEATHSIG).
TEST(LaunchLocalRanksTest, SighupIsForwardedAsSigterm) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"}, {{"FAKE_RANK_MODE", "wait"}}, OutputPrefix("hangup"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("ready", 2, absl::Seconds(20))) << launcher->Stdout();
  kill(launcher->pid(), SIGHUP);
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 0) << launcher->Stderr();
  EXPECT_THAT(launcher->Stdout(), HasSubstr("[rank 0] rank 0 got SIGTERM"));
  EXPECT_THAT(launcher->Stdout(), HasSubstr("[rank 1] rank 1 got SIGTERM"));
}

// SIGQUIT ("quit with a core dump") reaches every rank as itself, as torchrun forwards it, where
// the launcher's own death would SIGKILL them; a rank that ignores it is killed after the grace
// period.
TEST(LaunchLocalRanksTest, SigquitIsForwardedAndAnIgnoringRankKilled) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"}, {{"FAKE_RANK_MODE", "wait"}, {"FAKE_STUBBORN_RANK", "1"}},
      OutputPrefix("quit"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("ready", 2, absl::Seconds(20))) << launcher->Stdout();
  kill(launcher->pid(), SIGQUIT);
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 128 + SIGQUIT) << launcher->Stderr();
  EXPECT_THAT(launcher->Stderr(), HasSubstr("rank 0 was stopped by signal 3 from the launcher"));
  EXPECT_THAT(launcher->Stderr(), HasSubstr("rank 1 was stopped by signal 9 from the launcher"));
}

// The user's SIGTERM is forwarded while rank 2 is wedged (stopped); rank 1's collective with it
// times out, so the job has failed and the wedged rank gets SIGKILL after the grace period.
TEST(LaunchLocalRanksTest, WedgedRankIsKilledWhenAnotherFailsAfterAForwardedSigterm) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=3"}, {{"FAKE_RANK_MODE", "wait"}, {"FAKE_FAIL_RANK", "1"}},
      OutputPrefix("wedged"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("ready", 3, absl::Seconds(20))) << launcher->Stdout();
  const int wedged_pid = ReadyRankPid(launcher->Stdout(), 2);
  ASSERT_GT(wedged_pid, 0) << launcher->Stdout();
  kill(wedged_pid, SIGSTOP);
  // Stopped before the launcher forwards SIGTERM, else rank 2 could still handle it and exit 0.
  const absl::Time stopped_deadline = absl::Now() + absl::Seconds(5);
  while (ProcessState(wedged_pid) != 'T' && absl::Now() < stopped_deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(ProcessState(wedged_pid), 'T');
  kill(launcher->pid(), SIGTERM);
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status() << "\n" << launcher->Stderr();
  EXPECT_EQ(*status, 1) << launcher->Stderr();
  EXPECT_THAT(launcher->Stderr(),
              HasSubstr("rank 1 exited with status 1; stopping the other ranks"));
  EXPECT_THAT(launcher->Stderr(), HasSubstr("rank 2 was stopped by signal 9 from the launcher"));
}

// A rank killed from outside (kill -9, the OOM killer) is named as killed, not as exiting 137.
TEST(LaunchLocalRanksTest, RankKilledFromOutsideIsNamedAsKilled) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"}, {{"FAKE_RANK_MODE", "wait"}}, OutputPrefix("killed"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("ready", 2, absl::Seconds(20))) << launcher->Stdout();
  const int pid = ReadyRankPid(launcher->Stdout(), 1);
  ASSERT_GT(pid, 0) << launcher->Stdout();
  kill(pid, SIGKILL);
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 128 + SIGKILL);
  EXPECT_THAT(launcher->Stderr(), HasSubstr("launcher: rank 1 was killed by signal 9 (exit status "
                                            "137); stopping the other ranks"));
}

// A rank killed from outside printed no error: the failure told to a silent plain rank's stdout
// (titan_rl --json's) says it was killed, as the launcher's line on stderr does.
TEST(LaunchLocalRanksTest, RankKilledFromOutsideIsReportedAsKilled) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"},
      {{"FAKE_RANK_MODE", "wait"}, {"FAKE_PLAIN_STDOUT_RANK", "0"}}, OutputPrefix("killed_json"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("ready", 1, absl::Seconds(20))) << launcher->Stdout();
  const int pid = ReadyRankPid(launcher->Stdout(), 1);
  ASSERT_GT(pid, 0) << launcher->Stdout();
  kill(pid, SIGKILL);
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 128 + SIGKILL) << launcher->Stderr();
  EXPECT_EQ(launcher->Stdout(),
            absl::StrCat("[rank 1] ready pid=", pid,
                         "\nreport: rank 1 was killed by signal 9 (exit status 137)\n"));
  EXPECT_THAT(launcher->Stderr(), HasSubstr("launcher: rank 1 was killed by signal 9 (exit status "
                                            "137); stopping the other ranks"));
}

// The second SIGTERM kills the rank still saving (here: ignoring the first); the launcher exits
// 143 as one process would, not 137, which reads as an out-of-memory kill.
TEST(LaunchLocalRanksTest, SecondSigtermEndsTheJobWithItsStatus) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=1"},
      {{"FAKE_RANK_MODE", "fail"}, {"FAKE_FAIL_RANK", "none"}, {"FAKE_STUBBORN_RANK", "0"}},
      OutputPrefix("second"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  absl::SleepFor(absl::Seconds(1));  // the rank is up, ignoring SIGTERM
  kill(launcher->pid(), SIGTERM);
  absl::SleepFor(absl::Milliseconds(300));
  kill(launcher->pid(), SIGTERM);
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 128 + SIGTERM) << launcher->Stderr();
  EXPECT_THAT(launcher->Stderr(), HasSubstr("rank 0 was stopped by signal 9 from the launcher"));
}

// A rank that dies of the forwarded SIGTERM (it had no handler yet) did what it was told: the job
// did not finish cleanly, but that rank is no failure that stops the others.
TEST(LaunchLocalRanksTest, RankEndedByTheForwardedSigtermIsReportedAsStopped) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"},
      {{"FAKE_RANK_MODE", "wait"}, {"FAKE_UNHANDLED_RANK", "1"}}, OutputPrefix("unhandled"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("ready", 2, absl::Seconds(20))) << launcher->Stdout();
  kill(launcher->pid(), SIGTERM);
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 128 + SIGTERM) << launcher->Stderr();
  EXPECT_THAT(launcher->Stdout(), HasSubstr("[rank 0] rank 0 got SIGTERM"));
  EXPECT_THAT(launcher->Stderr(), HasSubstr("rank 1 was stopped by signal 15 from the launcher"));
  EXPECT_THAT(launcher->Stderr(), Not(HasSubstr("stopping the other ranks")));
}

TEST(LaunchLocalRanksTest, SigusrOneIsForwardedToEveryRankAndTheJobGoesOn) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"}, {{"FAKE_RANK_MODE", "wait"}}, OutputPrefix("usr1"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("ready", 2, absl::Seconds(20))) << launcher->Stdout();
  kill(launcher->pid(), SIGUSR1);
  ASSERT_TRUE(launcher->WaitForStdout("got SIGUSR1", 2, absl::Seconds(10))) << launcher->Stdout();
  kill(launcher->pid(), SIGTERM);
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 0) << launcher->Stderr();
  EXPECT_THAT(launcher->Stdout(), HasSubstr("[rank 0] rank 0 got SIGUSR1"));
  EXPECT_THAT(launcher->Stdout(), HasSubstr("[rank 1] rank 1 got SIGUSR1"));
}

// A dump request while no rank has a recorder (starting, or done) is logged and ignored: a
// watchdog's SIGUSR1 must not fail a job.
TEST(LaunchLocalRanksTest, SigusrOneWithoutARecorderIsLoggedAndTheJobSucceeds) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"}, {{"FAKE_RANK_MODE", "slow"}}, OutputPrefix("usr1_slow"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("started", 2, absl::Seconds(20))) << launcher->Stdout();
  // Until the launcher has exited too: its own shutdown is covered as well.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!IsZombie(launcher->pid()) && absl::Now() < deadline) {
    kill(launcher->pid(), SIGUSR1);
    absl::SleepFor(absl::Milliseconds(20));
  }
  absl::StatusOr<int> status = launcher->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, 0) << launcher->Stderr();
  EXPECT_THAT(launcher->Stderr(),
              HasSubstr("[rank 0] SIGUSR1: no collective flight recorder runs in this process"));
}

TEST(LaunchLocalRanksTest, KilledLauncherTakesItsRanksWithIt) {
  absl::StatusOr<Subprocess> launcher = Subprocess::Start(
      {FakeRank(), "--nproc_per_node=2"}, {{"FAKE_RANK_MODE", "wait"}}, OutputPrefix("orphans"));
  ASSERT_TRUE(launcher.ok()) << launcher.status();
  ASSERT_TRUE(launcher->WaitForStdout("ready", 2, absl::Seconds(20)));
  std::vector<int> rank_pids;
  for (const std::string& line : Lines(launcher->Stdout())) {
    rank_pids.push_back(std::atoi(line.substr(line.find("pid=") + 4).c_str()));
  }
  ASSERT_EQ(rank_pids.size(), 2u);
  kill(launcher->pid(), SIGKILL);
  ASSERT_TRUE(launcher->Wait(absl::Seconds(10)).ok());
  // PR_SET_PDEATHSIG: the ranks die with the launcher (gone, or a zombie awaiting its reaper).
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  for (int pid : rank_pids) {
    while (kill(pid, 0) == 0 && !IsZombie(pid) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_TRUE(kill(pid, 0) != 0 || IsZombie(pid)) << "rank pid " << pid << " outlived the launcher";
  }
}

}  // namespace
}  // namespace titan
