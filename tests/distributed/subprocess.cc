#include "tests/distributed/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace titan {
namespace {

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

int ExitStatusOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace

absl::StatusOr<Subprocess> Subprocess::Start(
    const std::vector<std::string>& argv,
    const std::vector<std::pair<std::string, std::string>>& extra_env,
    const std::string& output_prefix) {
  std::vector<std::string> args = argv;
  std::vector<char*> arg_ptrs;
  for (std::string& arg : args) arg_ptrs.push_back(arg.data());
  arg_ptrs.push_back(nullptr);
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) env.emplace_back(*entry);
  for (const auto& [name, value] : extra_env) env.push_back(absl::StrCat(name, "=", value));
  std::vector<char*> env_ptrs;
  for (std::string& entry : env) env_ptrs.push_back(entry.data());
  env_ptrs.push_back(nullptr);
  const std::string out_path = output_prefix + ".stdout";
  const std::string err_path = output_prefix + ".stderr";
  int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) {
    return absl::InternalError(absl::StrCat("open ", output_prefix, ": ", std::strerror(errno)));
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    execve(args[0].c_str(), arg_ptrs.data(), env_ptrs.data());
    _exit(127);
  }
  close(out_fd);
  close(err_fd);
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  return Subprocess(pid, output_prefix);
}

Subprocess::Subprocess(Subprocess&& other)
    : pid_(other.pid_), output_prefix_(std::move(other.output_prefix_)) {
  other.pid_ = -1;
}

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int wait_status = 0;
    pid_t done = waitpid(pid_, &wait_status, WNOHANG);
    if (done == pid_) {
      pid_ = -1;
      return ExitStatusOf(wait_status);
    }
    if (absl::Now() >= deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      return absl::DeadlineExceededError(
          absl::StrCat("process still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
}

bool Subprocess::WaitForStdout(const std::string& text, int count, absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    const std::string out = Stdout();
    int found = 0;
    for (size_t at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) ++found;
    if (found >= count) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

std::string Subprocess::Stdout() const { return ReadWhole(output_prefix_ + ".stdout"); }
std::string Subprocess::Stderr() const { return ReadWhole(output_prefix_ + ".stderr"); }

}  // namespace titan
