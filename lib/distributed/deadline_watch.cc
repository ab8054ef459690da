#include "lib/distributed/deadline_watch.h"

#include <thread>

#include "absl/synchronization/notification.h"

namespace titan {

void RunWithDeadline(absl::Duration timeout, const std::function<void()>& work,
                     const std::function<void()>& on_expiry) {
  absl::Notification done;
  std::thread watcher([&] {
    if (!done.WaitForNotificationWithTimeout(timeout)) on_expiry();
  });
  // Notified and joined on the way out, also when `work` throws.
  struct Finish {
    absl::Notification& done;
    std::thread& watcher;
    ~Finish() {
      done.Notify();
      watcher.join();
    }
  } finish{done, watcher};
  work();
}

}  // namespace titan
