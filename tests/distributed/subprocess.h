#ifndef TITAN_TESTS_DISTRIBUTED_SUBPROCESS_H_
#define TITAN_TESTS_DISTRIBUTED_SUBPROCESS_H_

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace titan {

// A child process for tests: output goes to files, waits are bounded, and a child still running
// when the test gives up (or the object dies) is killed.
class Subprocess {
 public:
  // Runs argv[0] with the test's environment plus `extra_env`; stdout/stderr land in
  // `output_prefix`.stdout / .stderr.
  static absl::StatusOr<Subprocess> Start(
      const std::vector<std::string>& argv,
      const std::vector<std::pair<std::string, std::string>>& extra_env,
      const std::string& output_prefix);

  Subprocess(Subprocess&& other);
  Subprocess& operator=(Subprocess&&) = delete;
  ~Subprocess();

  // The exit status (128+signal when killed); an error (after SIGKILL) when `timeout` passes first.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  // Polls the captured stdout until it holds `count` copies of `text`.
  bool WaitForStdout(const std::string& text, int count, absl::Duration timeout) const;

  std::string Stdout() const;
  std::string Stderr() const;
  pid_t pid() const { return pid_; }

 private:
  Subprocess(pid_t pid, std::string output_prefix)
      : pid_(pid), output_prefix_(std::move(output_prefix)) {}

  pid_t pid_ = -1;
  std::string output_prefix_;
};

}  // namespace titan

#endif  // TITAN_TESTS_DISTRIBUTED_SUBPROCESS_H_
