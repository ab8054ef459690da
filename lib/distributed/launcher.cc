#include "lib/distributed/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "glog/logging.h"
#include "lib/distributed/rank_output.h"
#include "lib/util/c10_log_filter.h"
#include "lib/util/file_util.h"

extern char** environ;

namespace titan {
namespace {

// Written by the signal handler, read by the launcher's poll loop (the self-pipe pattern: it works
// whichever thread receives the signal).
int g_signal_pipe_write = -1;

void ForwardToPipe(int signo) {
  int saved_errno = errno;
  unsigned char byte = static_cast<unsigned char>(signo);
  (void)!write(g_signal_pipe_write, &byte, 1);
  errno = saved_errno;
}

// Past this many ranks per CPU core they mostly wait for a core (and each loads LibTorch): a
// larger --nproc_per_node is a typo that would spawn processes until memory runs out.
constexpr int kMaxRanksPerCore = 8;

int MaxNprocPerNode() {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return kMaxRanksPerCore * static_cast<int>(std::max(1L, cores));
}

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat("launcher: ", what, ": ", std::strerror(errno)));
}

// A socket bound to a free port and listening, for rank 0's store to take over: the port is
// never free between the pick and the store's start, where another job could take it.
struct StoreListener {
  int fd = -1;
  int port = 0;
};

// IPv6 and IPv4 on one socket, as c10d's own store binds, so MASTER_ADDR may be of either family;
// IPv4 alone where the host has no IPv6.
absl::StatusOr<StoreListener> ListenOnFreePort() {
  StoreListener listener;
  sockaddr_storage addr{};
  socklen_t len = sizeof(sockaddr_in6);
  listener.fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener.fd >= 0) {
    const int v6_only = 0;
    setsockopt(listener.fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6_only, sizeof(v6_only));
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
    v6->sin6_family = AF_INET6;
    v6->sin6_addr = in6addr_any;
  } else {
    listener.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener.fd < 0) return Errno("socket");
    auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
    v4->sin_family = AF_INET;
    v4->sin_addr.s_addr = htonl(INADDR_ANY);
    len = sizeof(sockaddr_in);
  }
  if (bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      listen(listener.fd, SOMAXCONN) != 0 ||
      getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    absl::Status status = Errno("listen on a free port");
    close(listener.fd);
    return status;
  }
  listener.port =
      ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return listener;
}

struct Child {
  pid_t pid = -1;
  bool exited = false;
  int exit_status = 0;
  RankStream streams[2];
};

// "rank 1 exited with status 3", "rank 1 was killed by signal 9 (exit status 137)": the launcher's
// log line and report_failure's message say the same.
std::string RankEnd(int rank, int wait_status, int exit_status) {
  return WIFSIGNALED(wait_status)
             ? absl::StrCat("rank ", rank, " was killed by signal ", WTERMSIG(wait_status),
                            " (exit status ", exit_status, ")")
             : absl::StrCat("rank ", rank, " exited with status ", exit_status);
}

int ExitStatusOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::vector<std::string> ArgsWithoutNproc(int argc, char** argv) {
  std::vector<std::string> args;
  // Exactly the spellings NprocPerNodeFlag read: another ("-nproc_per_node=3") reaches the ranks'
  // flag parsing, which refuses it as it does in one process.
  for (int i = 0; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    if (i > 0 && arg == "--nproc_per_node") {
      ++i;  // "--nproc_per_node N": drop the value too.
      continue;
    }
    if (i > 0 && absl::StartsWith(arg, "--nproc_per_node=")) continue;
    args.emplace_back(arg);
  }
  return args;
}

// Each rank's environment: this process's, less what the launcher sets, plus the rendezvous
// (torchrun's names) and the rank's own; rank 0 also gets the store's listening socket.
std::vector<std::vector<std::string>> RankEnvironments(int nproc, const std::string& master_addr,
                                                       int master_port, int listener_fd) {
  const absl::flat_hash_map<std::string, std::string> shared_vars = {
      {"WORLD_SIZE", absl::StrCat(nproc)},     {"LOCAL_WORLD_SIZE", absl::StrCat(nproc)},
      {"MASTER_ADDR", master_addr},            {"MASTER_PORT", absl::StrCat(master_port)},
  };
  std::vector<std::vector<std::string>> envs(nproc);
  for (int rank = 0; rank < nproc; ++rank) {
    for (char** entry = environ; *entry != nullptr; ++entry) {
      absl::string_view name = absl::string_view(*entry).substr(0, std::strcspn(*entry, "="));
      if (shared_vars.contains(name) || name == "RANK" || name == "LOCAL_RANK" ||
          name == kStoreListenFdVar) {
        continue;
      }
      envs[rank].emplace_back(*entry);
    }
    for (const auto& [name, value] : shared_vars) envs[rank].push_back(absl::StrCat(name, "=", value));
    envs[rank].push_back(absl::StrCat("RANK=", rank));
    envs[rank].push_back(absl::StrCat("LOCAL_RANK=", rank));
    if (rank == 0 && listener_fd >= 0) {
      envs[rank].push_back(absl::StrCat(kStoreListenFdVar, "=", listener_fd));
    }
  }
  return envs;
}

// `strings` as execve takes them: pointers into them, then nullptr.
std::vector<char*> ExecArray(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// While open, the signals the launcher handles write their numbers to a pipe its poll loop reads.
class SignalPipe {
 public:
  ~SignalPipe() { Close(); }

  absl::Status Open() {
    if (pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) return Errno("pipe");
    g_signal_pipe_write = fds_[1];
    struct sigaction action {};
    action.sa_handler = ForwardToPipe;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (int i = 0; i < kNumHandled; ++i) sigaction(kHandled[i], &action, &previous_[i]);
    return absl::OkStatus();
  }

  // Restores the handlers there were and closes the pipe.
  void Close() {
    if (fds_[0] < 0) return;
    for (int i = 0; i < kNumHandled; ++i) sigaction(kHandled[i], &previous_[i], nullptr);
    g_signal_pipe_write = -1;
    close(fds_[0]);
    close(fds_[1]);
    fds_[0] = fds_[1] = -1;
  }

  int read_fd() const { return fds_[0]; }

 private:
  static constexpr int kHandled[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1};
  static constexpr int kNumHandled = sizeof(kHandled) / sizeof(kHandled[0]);
  int fds_[2] = {-1, -1};
  struct sigaction previous_[kNumHandled];
};

// Forks the ranks, each exec'ing /proc/self/exe with `argv` and its environment, stdout and stderr
// piped back; stops at the first failure, `children` holding the ranks spawned until then.
absl::Status SpawnRanks(std::vector<char*>& argv, std::vector<std::vector<char*>>& envs,
                        int listener_fd, const LaunchOptions& options, FailureLines* failure_lines,
                        std::vector<Child>& children) {
  const pid_t launcher_pid = getpid();
  for (int rank = 0; rank < static_cast<int>(children.size()); ++rank) {
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC) != 0) return Errno("pipe");
    if (pipe2(err_pipe, O_CLOEXEC) != 0) {
      absl::Status status = Errno("pipe");
      close(out_pipe[0]);
      close(out_pipe[1]);
      return status;
    }
    pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls from here. Own process group: a terminal's Ctrl-C reaches
      // only the launcher, which forwards it once.
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher_pid) _exit(1);
      dup2(out_pipe[1], STDOUT_FILENO);
      dup2(err_pipe[1], STDERR_FILENO);
      // execve resets handlers but keeps ignored signals ignored: a dump request forwarded while
      // the rank's loader runs (before dump_signal's handler is back) must not end it.
      signal(SIGUSR1, SIG_IGN);
      if (rank == 0 && listener_fd >= 0) fcntl(listener_fd, F_SETFD, 0);  // Kept across execve.
      execve("/proc/self/exe", argv.data(), envs[rank].data());
      const char kMessage[] = "launcher: execve(/proc/self/exe) failed\n";
      (void)!write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
      _exit(127);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    if (pid < 0) {
      absl::Status status = Errno("fork");
      close(out_pipe[0]);
      close(err_pipe[0]);
      return status;
    }
    children[rank].pid = pid;
    const std::string prefix = absl::StrCat("[rank ", rank, "] ");
    children[rank].streams[0] = {out_pipe[0], STDOUT_FILENO,
                                 rank == options.plain_stdout_rank ? "" : prefix, ""};
    children[rank].streams[1] = {err_pipe[0], STDERR_FILENO, prefix, "", rank, failure_lines};
  }
  return absl::OkStatus();
}

// Watches the spawned ranks until they have exited and their output is passed on: forwards the
// launcher's signals, stops the others when one fails, and says how the job ended.
class RankSupervisor {
 public:
  RankSupervisor(std::vector<Child>& children, const LaunchOptions& options,
                 FailureLines& failure_lines)
      : children_(children), options_(options), failure_lines_(failure_lines) {}

  // Stops every rank with `signo` and gives them the grace period before SIGKILL. The launcher's
  // own SIGTERM (a rank failed) is not sent to ranks a forwarded signal is stopping already, but
  // they still get the deadline; a signal the user chose (SIGQUIT) always reaches them.
  void StopAll(int signo = SIGTERM) {
    if (!stopping_ || signo != SIGTERM) StopAllWith(signo);
    stopping_ = true;
    kill_deadline_ = std::min(kill_deadline_, absl::Now() + options_.grace_period);
  }

  // Runs until every rank is reaped and its output drained; a failed poll kills the ranks.
  absl::Status Supervise(int signal_fd) {
    while (true) {
      const bool all_exited = ReapExited();
      std::vector<pollfd> fds = {{signal_fd, POLLIN, 0}};
      std::vector<std::pair<int, int>> fd_owner;  // (rank, stream index) per fds[i + 1].
      for (int rank = 0; rank < static_cast<int>(children_.size()); ++rank) {
        for (int s = 0; s < 2; ++s) {
          if (children_[rank].streams[s].fd >= 0) {
            fds.push_back({children_[rank].streams[s].fd, POLLIN, 0});
            fd_owner.emplace_back(rank, s);
          }
        }
      }
      if (all_exited) {
        if (fd_owner.empty()) return absl::OkStatus();
        // Grandchildren that inherited a rank's pipes get a moment, not forever.
        if (drain_deadline_ == absl::InfiniteFuture()) {
          drain_deadline_ = absl::Now() + absl::Seconds(1);
        }
      }
      const absl::Time now = absl::Now();
      if (now >= kill_deadline_) {
        StopAllWith(SIGKILL);
        kill_deadline_ = absl::InfiniteFuture();
      }
      if (now >= drain_deadline_) return absl::OkStatus();
      const absl::Time next = std::min(kill_deadline_, drain_deadline_);
      const int timeout_ms = next == absl::InfiniteFuture()
                                 ? -1
                                 : static_cast<int>(absl::ToInt64Milliseconds(next - now)) + 1;
      if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) {
        absl::Status status = Errno("poll");
        SignalAll(SIGKILL);
        return status;
      }
      if (fds[0].revents & POLLIN) ForwardSignals(signal_fd);
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) ReadStream(fd_owner[i - 1].first, fd_owner[i - 1].second);
      }
    }
  }

  // Passes on what the streams still hold, kills and reaps a rank still running, then prints the
  // failure lines: last, as a single process's failure line would be.
  void Finish() {
    for (Child& child : children_) {
      for (RankStream& stream : child.streams) {
        if (stream.fd < 0) continue;
        Emit(stream, /*flush=*/true);
        close(stream.fd);
      }
      if (child.pid > 0 && !child.exited) {
        kill(child.pid, SIGKILL);
        waitpid(child.pid, nullptr, 0);
      }
    }
    (void)WriteFully(STDERR_FILENO, failure_lines_.Text(), "stderr");
  }

  // LaunchLocalRanks' result once the ranks are done; `launch_status` is the spawn's or poll's.
  template <typename LaunchFailed>
  absl::StatusOr<int> Result(const absl::Status& launch_status, LaunchFailed launch_failed) {
    if (!launch_status.ok()) {
      return plain_rank_printed_ ? launch_status : launch_failed(launch_status);
    }
    if (failure_status_ == 0 && interrupted_status_ != 0) stopped_status_ = interrupted_status_;
    if (failure_status_ != 0 || stopped_status_ != 0) {
      if (!output_status_.ok()) LOG(ERROR) << "launcher: " << output_status_.message();
      if (failure_rank_ >= 0) {
        // The failing rank's own failure line says why; else it is among its stderr lines.
        const std::string own = failure_lines_.FirstLine(failure_rank_);
        absl::StrAppend(&failure_text_, own.empty() ? " (its error is on stderr)" : ": ", own);
      }
      if (options_.report_failure && options_.plain_stdout_rank >= 0 && !plain_rank_printed_) {
        options_.report_failure(
            failure_status_ != 0
                ? failure_text_
                : absl::StrCat("the ranks were stopped (exit status ", stopped_status_, ")"));
      }
      return failure_status_ != 0 ? failure_status_ : stopped_status_;
    }
    // Not told to report_failure: stdout, where it writes, is what was lost.
    if (!output_status_.ok()) return output_status_;
    return 0;
  }

 private:
  void SignalAll(int signo) {
    for (Child& child : children_) {
      if (child.pid > 0 && !child.exited) kill(child.pid, signo);
    }
  }

  // A rank that dies of a signal sent this way did what the launcher asked: no failure of its own.
  void StopAllWith(int signo) {
    stop_signals_sent_.insert(signo);
    SignalAll(signo);
  }

  // The first failed write to the launcher's stdout is kept (the ranks' output is lost); a failed
  // write to stderr has nowhere to be reported.
  void Emit(RankStream& stream, bool flush) {
    const absl::Status written = EmitLines(stream, flush);
    if (stream.target_fd == STDOUT_FILENO && output_status_.ok()) output_status_ = written;
  }

  // Reaps the ranks that exited; the first to fail stops the others. True when none is left.
  bool ReapExited() {
    bool all_exited = true;
    for (int rank = 0; rank < static_cast<int>(children_.size()); ++rank) {
      Child& child = children_[rank];
      if (child.pid <= 0 || child.exited) continue;
      int wait_status = 0;
      if (waitpid(child.pid, &wait_status, WNOHANG) != child.pid) {
        all_exited = false;
        continue;
      }
      child.exited = true;
      child.exit_status = ExitStatusOf(wait_status);
      if (WIFSIGNALED(wait_status) && stop_signals_sent_.contains(WTERMSIG(wait_status))) {
        LOG(WARNING) << "launcher: rank " << rank << " was stopped by signal "
                     << WTERMSIG(wait_status) << " from the launcher";
        if (stopped_status_ == 0) stopped_status_ = child.exit_status;
      } else if (child.exit_status != 0 && failure_status_ == 0) {
        failure_status_ = child.exit_status;
        failure_text_ = RankEnd(rank, wait_status, failure_status_);
        LOG(ERROR) << "launcher: " << failure_text_ << "; stopping the other ranks";
        // A rank that exited printed its error (report_failure quotes it); one killed from
        // outside (kill -9, the OOM killer) had no chance to.
        if (!WIFSIGNALED(wait_status)) failure_rank_ = rank;
        StopAll();
      }
    }
    return all_exited;
  }

  void ForwardSignals(int signal_fd) {
    unsigned char signals[64];
    ssize_t n = read(signal_fd, signals, sizeof(signals));
    for (ssize_t i = 0; i < n; ++i) {
      // Every rank writes its collective trace (lib/distributed/comm_trace.h).
      if (signals[i] == SIGUSR1) SignalAll(SIGUSR1);
      if (signals[i] == SIGQUIT) {
        // "Quit now, with a core dump" reaches every rank as itself (torchrun's too), not as
        // the SIGKILL of the launcher's own death; a rank that survives it is killed after the
        // grace period.
        StopAll(SIGQUIT);
        if (interrupted_status_ == 0) interrupted_status_ = 128 + SIGQUIT;
      }
      if (signals[i] == SIGINT || signals[i] == SIGTERM || signals[i] == SIGHUP) {
        if (stopping_) {
          // A second interrupt means "now"; the launcher exits with its status, as one process.
          StopAllWith(SIGKILL);
          if (interrupted_status_ == 0) interrupted_status_ = 128 + signals[i];
        } else {
          // The first is forwarded with no deadline, as a save takes what it takes: a wedged rank
          // fails its peers' collectives ([comm] train_timeout_seconds) and StopAll ends it.
          // SIGHUP (the terminal or ssh session gone) is a SIGTERM to the ranks, as torchrun
          // forwards it: the same save and exit, whichever handlers a rank has installed.
          StopAllWith(signals[i] == SIGHUP ? SIGTERM : signals[i]);
          stopping_ = true;
        }
      }
    }
  }

  void ReadStream(int rank, int s) {
    RankStream& stream = children_[rank].streams[s];
    char buffer[65536];
    ssize_t n = read(stream.fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {
      Emit(stream, /*flush=*/true);
      close(stream.fd);
      stream.fd = -1;
      return;
    }
    stream.pending.append(buffer, static_cast<size_t>(n));
    if (s == 0 && rank == options_.plain_stdout_rank) plain_rank_printed_ = true;
    Emit(stream, /*flush=*/false);
  }

  std::vector<Child>& children_;
  const LaunchOptions& options_;
  FailureLines& failure_lines_;
  int failure_status_ = 0;           // The first failing rank's.
  std::string failure_text_;         // How it ended, for report_failure.
  int failure_rank_ = -1;            // The first failing rank, when it exited (not killed).
  bool plain_rank_printed_ = false;  // options.plain_stdout_rank wrote to its stdout
  int stopped_status_ = 0;           // The first rank's that died of a signal the launcher sent it.
  int interrupted_status_ = 0;  // 128 + the second stop signal's number, which killed the ranks
  bool stopping_ = false;
  absl::flat_hash_set<int> stop_signals_sent_;
  absl::Time kill_deadline_ = absl::InfiniteFuture();
  absl::Time drain_deadline_ = absl::InfiniteFuture();
  absl::Status output_status_;
};

}  // namespace

absl::StatusOr<int> LaunchLocalRanks(int nproc, int argc, char** argv,
                                     const LaunchOptions& options) {
  // The launch's own failure, before any rank could print: told as a rank's failure would be.
  const auto launch_failed = [&options](absl::Status status) {
    if (options.report_failure && options.plain_stdout_rank >= 0) {
      options.report_failure(status.message());
    }
    return status;
  };
  if (nproc < 1) {
    return launch_failed(absl::InvalidArgumentError(
        absl::StrCat("--nproc_per_node: expected a positive count, got ", nproc)));
  }
  const char* addr_env = getenv("MASTER_ADDR");
  std::string master_addr = addr_env != nullptr ? addr_env : "127.0.0.1";
  int master_port = 0;
  StoreListener listener;  // Without MASTER_PORT only; passed to rank 0, closed here once spawned.
  if (const char* port_env = getenv("MASTER_PORT")) {
    if (!absl::SimpleAtoi(port_env, &master_port)) {
      return launch_failed(absl::InvalidArgumentError(absl::StrCat(
          "environment variable MASTER_PORT: expected integer, got \"", port_env, "\"")));
    }
  } else {
    absl::StatusOr<StoreListener> picked = ListenOnFreePort();
    if (!picked.ok()) return launch_failed(picked.status());
    listener = *picked;
    master_port = listener.port;
  }
  const auto close_listener = absl::MakeCleanup([&listener] {
    if (listener.fd >= 0) close(listener.fd);
  });

  // Everything the children need is built before fork: only async-signal-safe calls follow it.
  std::vector<std::string> args = ArgsWithoutNproc(argc, argv);
  std::vector<char*> arg_ptrs = ExecArray(args);
  std::vector<std::vector<std::string>> envs =
      RankEnvironments(nproc, master_addr, master_port, listener.fd);
  std::vector<std::vector<char*>> env_ptrs;
  for (std::vector<std::string>& env : envs) env_ptrs.push_back(ExecArray(env));

  SignalPipe signal_pipe;
  if (absl::Status opened = signal_pipe.Open(); !opened.ok()) return launch_failed(opened);
  FailureLines failure_lines(options.failure_line_prefix);
  std::vector<Child> children(nproc);
  absl::Status launch_status =
      SpawnRanks(arg_ptrs, env_ptrs, listener.fd, options, &failure_lines, children);
  // Rank 0 holds the port now.
  if (listener.fd >= 0) close(std::exchange(listener.fd, -1));
  RankSupervisor supervisor(children, options, failure_lines);
  if (!launch_status.ok()) supervisor.StopAll();
  if (absl::Status polled = supervisor.Supervise(signal_pipe.read_fd()); !polled.ok()) {
    launch_status = polled;
  }
  supervisor.Finish();
  signal_pipe.Close();
  return supervisor.Result(launch_status, launch_failed);
}

absl::StatusOr<int> NprocPerNodeFlag(int argc, char** argv) {
  constexpr absl::string_view kFlag = "--nproc_per_node";
  int found = 0;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg.substr(0, kFlag.size()) != kFlag) continue;
    absl::string_view value;
    if (arg.size() > kFlag.size() && arg[kFlag.size()] == '=') {
      value = arg.substr(kFlag.size() + 1);
    } else if (arg.size() == kFlag.size()) {
      // Refused wherever it stands: last, after a --nproc_per_node=N, it would be dropped unread.
      if (i + 1 == argc) {
        return absl::InvalidArgumentError(
            "--nproc_per_node: expected a rank count after it (or --nproc_per_node=N)");
      }
      value = argv[i + 1];
    } else {
      continue;
    }
    int nproc = 0;
    if (!absl::SimpleAtoi(value, &nproc) || nproc < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nproc_per_node: expected a positive integer, got \"", value, "\""));
    }
    if (nproc > MaxNprocPerNode()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nproc_per_node: expected at most ", MaxNprocPerNode(), " ranks (",
                       kMaxRanksPerCore, " per CPU core of this machine), got ", nproc));
    }
    // Refused rather than one of them taken: the ranks would run as the other one was meant to.
    if (found != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nproc_per_node given twice (", found, " and ", nproc, "): give it once"));
    }
    found = nproc;
  }
  return found;
}

int RunRankedTool(int argc, char** argv, const std::string& name, const std::string& help,
                  const std::function<absl::Status()>& run, const LaunchOptions& launch) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::cout << help;
      return 0;
    }
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  // A failure is said in titan's lines; LibTorch's own lines keep their message, not a backtrace.
  FilterC10LogOutput();
  // `bazel run` starts us in the runfiles tree; relative paths mean the user's directory.
  if (const char* dir = std::getenv("BUILD_WORKING_DIRECTORY"); dir != nullptr) {
    if (::chdir(dir) != 0) PLOG(FATAL) << "chdir " << dir;
  }
  absl::StatusOr<int> nproc = NprocPerNodeFlag(argc, argv);
  // `run` and LaunchLocalRanks report their own failures; the flag's is reported here.
  if (!nproc.ok() && launch.report_failure) launch.report_failure(nproc.status().message());
  if (nproc.ok() && *nproc > 0) {
    LaunchOptions options = launch;
    options.failure_line_prefix = absl::StrCat(name, ": ");
    absl::StatusOr<int> exit_code = LaunchLocalRanks(*nproc, argc, argv, options);
    if (exit_code.ok()) return *exit_code;
    nproc = exit_code.status();
  }
  const absl::Status status = nproc.ok() ? run() : nproc.status();
  if (!status.ok()) {
    std::cerr << name << ": " << status.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace titan
