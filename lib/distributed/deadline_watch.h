#ifndef TITAN_LIB_DISTRIBUTED_DEADLINE_WATCH_H_
#define TITAN_LIB_DISTRIBUTED_DEADLINE_WATCH_H_

#include <functional>

#include "absl/time/time.h"

namespace titan {

// Runs `work` on this thread; if it has not returned (or thrown) within `timeout`, a watcher
// thread calls `on_expiry`, once, while `work` goes on: for calls that cannot be cancelled (an
// NCCL communicator's connection waits for every member without a timeout of its own), where
// on_expiry ends the process. on_expiry runs on a bare thread: it must not throw. Returns after
// `work` and any on_expiry call have.
void RunWithDeadline(absl::Duration timeout, const std::function<void()>& work,
                     const std::function<void()>& on_expiry);

}  // namespace titan

#endif  // TITAN_LIB_DISTRIBUTED_DEADLINE_WATCH_H_
