// Benchmark (not a test): what recording one collective costs the thread that issues it: CommTrace
// Record + Retire of a one-tensor all_reduce, ring of 20000 entries (the default), against a
// disabled trace (trace_buf_size 0).
#include <chrono>
#include <cstdio>
#include <memory>

#include <ATen/ATen.h>

#include "lib/distributed/comm_trace.h"

namespace {

class DoneWork : public c10d::Work {
 public:
  bool isCompleted() override { return true; }
};

double NanosecondsPerOperation(int buffer_size, int operations) {
  titan::CommTraceOptions options;
  options.buffer_size = buffer_size;
  options.folder = "/nonexistent";  // Never dumped.
  std::shared_ptr<titan::CommTrace> trace = *titan::CommTrace::Create(options);
  std::shared_ptr<titan::TraceGroup> group = trace->AddGroup("gloo:dp_shard/0", {0, 1}, "gloo");
  const at::Tensor tensor = at::zeros({1024});
  const c10::intrusive_ptr<c10d::Work> work = c10::make_intrusive<DoneWork>();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < operations; ++i) {
    const titan::TraceId id = trace->Record(group.get(), "all_reduce", false, {tensor}, {tensor},
                                            work, absl::Seconds(100));
    trace->Retire(group.get(), id, true);
  }
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / operations;
}

}  // namespace

int main() {
  constexpr int kOperations = 200000;  // Wraps the default ring ten times.
  NanosecondsPerOperation(20000, kOperations / 10);  // Warm-up.
  const double off = NanosecondsPerOperation(0, kOperations);
  const double on = NanosecondsPerOperation(20000, kOperations);
  std::printf("record + retire per operation: trace_buf_size=0 %.0f ns, 20000 %.0f ns\n", off, on);
  return 0;
}
