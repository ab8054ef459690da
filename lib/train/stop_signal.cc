#include "lib/train/stop_signal.h"

#include <atomic>
#include <csignal>
#include <utility>

#include "lib/util/status_macros.h"

namespace titan {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal) {
  if (g_stop_signal.exchange(signal) == 0) return;
  // A second signal: the user will not wait for the step and its save (the launcher's own second
  // signal kills its ranks; a process on its own, under srun or torchrun, ends here).
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

StopSignal::StopSignal(const DistributedRuntime& runtime) : runtime_(runtime) {
  g_stop_signal = 0;
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  // A hangup (the terminal or ssh session gone) stops as SIGTERM does, as the launcher forwards it.
  std::signal(SIGHUP, OnStopSignal);
}

StopSignal::~StopSignal() {
  // The last all-reduce must not outlive its tensor.
  if (work_ != nullptr) (void)work_->Wait();
}

absl::Status StopSignal::Finish() {
  if (work_ == nullptr) return absl::OkStatus();
  return std::exchange(work_, nullptr)->Wait();
}

int StopSignal::Received() { return g_stop_signal.load(); }

absl::StatusOr<int> StopSignal::Agreed() {
  if (!runtime_.distributed()) return g_stop_signal.load();
  int agreed = 0;
  if (work_ != nullptr) {
    // Issued a step ago: it has long completed, so waiting costs nothing.
    TITAN_RETURN_IF_ERROR(std::exchange(work_, nullptr)->Wait());
    agreed = static_cast<int>(flag_.item<int64_t>());
  }
  flag_ = at::full({1}, g_stop_signal.load(), at::kLong);
  TITAN_ASSIGN_OR_RETURN(work_, runtime_.comm(MeshGroup::kWorld).AllReduce(flag_, ReduceOp::kMax));
  return agreed;
}

}  // namespace titan
