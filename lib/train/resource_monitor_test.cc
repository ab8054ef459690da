#include "lib/train/resource_monitor.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace titan {
namespace {

TEST(ResourceMonitorTest, ReportsHostMemoryAndStopsPromptly) {
  const std::string line = ResourceMonitor::Report(at::Device(at::kCPU));
  EXPECT_TRUE(absl::StartsWith(line, "monitor: host ")) << line;
  EXPECT_TRUE(absl::StrContains(line, "GiB resident (peak ")) << line;
  // A long interval must not delay shutdown: the destructor wakes the thread.
  const auto start = std::chrono::steady_clock::now();
  { ResourceMonitor monitor(absl::Hours(1), at::Device(at::kCPU)); }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(ResourceMonitorTest, FromConfigFollowsMonitoringInterval) {
  JobConfig config;
  EXPECT_EQ(ResourceMonitor::FromConfig(config, at::Device(at::kCPU)), nullptr);
  config.mutable_job()->set_monitoring_interval(3600);
  EXPECT_NE(ResourceMonitor::FromConfig(config, at::Device(at::kCPU)), nullptr);
}

}  // namespace
}  // namespace titan
