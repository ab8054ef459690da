// Benchmark (not a test): what recording one collective costs the thread that issues it: CommTrace
// Record + Retire of a one-tensor all_reduce, ring of 20000 entries (the default), against a
// disabled trace (trace_buf_size 0); and, given a folder, how long writing a full ring's dump
// takes.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "lib/distributed/comm_trace.h"

namespace {

class DoneWork : public c10d::Work {
 public:
  bool isCompleted() override { return true; }
};

double NanosecondsPerOperation(int buffer_size, int operations, const std::string& dump_folder) {
  titan::CommTraceOptions options;
  options.buffer_size = buffer_size;
  options.folder = dump_folder;
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
  if (!dump_folder.empty()) {
    const auto dump_start = std::chrono::steady_clock::now();
    const absl::Status dumped = trace->Dump("benchmark");
    const std::chrono::duration<double, std::milli> dump =
        std::chrono::steady_clock::now() - dump_start;
    std::printf("dump of %d entries: %.0f ms (%s)\n", buffer_size, dump.count(),
                dumped.ok() ? trace->DumpPath().c_str() : std::string(dumped.message()).c_str());
  }
  return elapsed.count() / operations;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int kOperations = 200000;                    // Wraps the default ring ten times.
  NanosecondsPerOperation(20000, kOperations / 10, "");  // Warm-up.
  const double off = NanosecondsPerOperation(0, kOperations, "");
  const double on = NanosecondsPerOperation(20000, kOperations, argc > 1 ? argv[1] : "");
  std::printf("record + retire per operation: trace_buf_size=0 %.0f ns, 20000 %.0f ns\n", off, on);
  return 0;
}
