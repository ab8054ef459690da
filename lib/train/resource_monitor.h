#ifndef TITAN_LIB_TRAIN_RESOURCE_MONITOR_H_
#define TITAN_LIB_TRAIN_RESOURCE_MONITOR_H_

#include <ATen/ATen.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/time/time.h"
#include "lib/config/job_config.pb.h"

namespace titan {

// [job] monitoring_interval: a background thread that logs this process's host memory (resident
// and peak) and peak device memory every `interval`, so a slow leak or a creeping peak shows up
// between log steps. Stops when destroyed.
class ResourceMonitor {
 public:
  ResourceMonitor(absl::Duration interval, const at::Device& device);
  ~ResourceMonitor();
  ResourceMonitor(const ResourceMonitor&) = delete;

  // The monitor [job] monitoring_interval asks for; null when it is 0 (off).
  static std::unique_ptr<ResourceMonitor> FromConfig(const JobConfig& config,
                                                     const at::Device& device);
  ResourceMonitor& operator=(const ResourceMonitor&) = delete;

  // The line it logs, e.g. "monitor: host 1.23 GiB resident (peak 1.50 GiB), device peak
  // 0.80 GiB".
  static std::string Report(const at::Device& device);

 private:
  void Run();

  const absl::Duration interval_;
  const at::Device device_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace titan

#endif  // TITAN_LIB_TRAIN_RESOURCE_MONITOR_H_
