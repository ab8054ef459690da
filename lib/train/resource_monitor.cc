#include "lib/train/resource_monitor.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "lib/metrics/flops.h"
#include "lib/train/device.h"

namespace titan {
namespace {

double ResidentGiB() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return static_cast<double>(resident) * ::sysconf(_SC_PAGESIZE) / (1 << 30);
}

}  // namespace

ResourceMonitor::ResourceMonitor(absl::Duration interval, const at::Device& device)
    : interval_(interval), device_(device), thread_([this] { Run(); }) {}

std::unique_ptr<ResourceMonitor> ResourceMonitor::FromConfig(const JobConfig& config,
                                                             const at::Device& device) {
  const int64_t interval = config.job().monitoring_interval();
  if (interval <= 0) return nullptr;
  return std::make_unique<ResourceMonitor>(absl::Seconds(interval), device);
}

ResourceMonitor::~ResourceMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::string ResourceMonitor::Report(const at::Device& device) {
  std::string line = absl::StrFormat("monitor: host %.2f GiB resident (peak %.2f GiB)",
                                     ResidentGiB(), PeakRssGiB());
  if (device.is_cuda()) absl::StrAppendFormat(&line, ", device peak %.2f GiB", PeakMemoryGiB(device));
  return line;
}

void ResourceMonitor::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, absl::ToChronoSeconds(interval_), [this] { return stop_; })) {
    LOG(INFO) << Report(device_);
  }
}

}  // namespace titan
