// Tests: the warnings glog logs while a WarningCollector lives.

#ifndef TITAN_LIB_UTIL_WARNING_COLLECTOR_H_
#define TITAN_LIB_UTIL_WARNING_COLLECTOR_H_

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "glog/logging.h"

namespace titan {

// Collects the warnings logged while it lives.
class WarningCollector : public google::LogSink {
 public:
  WarningCollector() { google::AddLogSink(this); }
  ~WarningCollector() override { google::RemoveLogSink(this); }

  void send(google::LogSeverity severity, const char* /*full_filename*/,
            const char* /*base_filename*/, int /*line*/, const google::LogMessageTime& /*time*/,
            const char* message, size_t message_len) override {
    if (severity != google::GLOG_WARNING) return;
    std::lock_guard<std::mutex> lock(mutex_);
    warnings_.emplace_back(message, message_len);
  }

  std::vector<std::string> warnings() {
    std::lock_guard<std::mutex> lock(mutex_);
    return warnings_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> warnings_;
};

}  // namespace titan

#endif  // TITAN_LIB_UTIL_WARNING_COLLECTOR_H_
