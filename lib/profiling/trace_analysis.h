#ifndef TITAN_LIB_PROFILING_TRACE_ANALYSIS_H_
#define TITAN_LIB_PROFILING_TRACE_ANALYSIS_H_

// Reads a Kineto Chrome trace (what StepProfiler writes) into an op table and each traced step's
// split into compute, exposed communication and idle time.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace titan {

// One "ProfilerStep#<step>" range, split three ways (the parts add up to duration_ms).
//   CPU traces (the step's thread): compute is the time inside ATen ops ("aten::" cpu_op events;
//   autograd's own cpu_op wrappers count only through the ATen ops inside them) and not inside a
//   collective; exposed communication is the time inside a collective's range ("comm:<op>" and
//   "comm:<op>:wait", which the communicator opens around issuing and waiting); idle is the rest
//   (the trainer's own code, allocator, autograd bookkeeping between ops).
//   GPU traces: compute is the time any non-NCCL kernel, memcpy or memset runs; exposed
//   communication the time an NCCL kernel runs while no compute does; idle the rest.
struct StepTime {
  int64_t step = 0;
  double duration_ms = 0;
  double compute_ms = 0;
  double exposed_comm_ms = 0;
  double idle_ms = 0;
};

// Where an op ran: on the thread running the step (ATen ops, autograd, the trainer's ranges), on
// another host thread (Gloo's workers, whose collectives overlap the step) or beside the step on
// its thread (a range outliving the one it started in: an asynchronous send or recv), or on the
// GPU.
enum class OpPlace { kStepThread, kOtherThread, kDevice };
// "step thread", "other thread", "device".
const char* OpPlaceName(OpPlace place);

// Every event of one name and place in the traced steps, as torch.profiler's key_averages()
// groups them by name.
struct OpStats {
  std::string name;
  OpPlace place = OpPlace::kStepThread;
  int64_t calls = 0;
  double self_ms = 0;  // total minus the time of the events nested directly inside
  double total_ms = 0;
  double flops = 0;            // summed over calls; 0 where OpFlops does not know the op
  std::string input_shapes;    // the most frequent "Input Dims", e.g. [[1024, 256], [256, 256]]
  int64_t shape_variants = 0;  // distinct "Input Dims" seen
};

struct TraceAnalysis {
  std::vector<StepTime> steps;   // by step
  std::vector<OpStats> ops;      // by self time, largest first
  bool device_timeline = false;  // the split came from GPU kernels

  // Whether `op`'s time is part of the steps' time: ops on the step's thread in CPU traces,
  // kernels in GPU traces. Their self times add up to at most the steps' time.
  bool InStepTime(const OpStats& op) const {
    return op.place == (device_timeline ? OpPlace::kDevice : OpPlace::kStepThread);
  }
};

// `source` names the trace in errors. A trace without a ProfilerStep# range is an error.
absl::StatusOr<TraceAnalysis> AnalyzeTrace(const nlohmann::json& trace, const std::string& source);
// The same for a trace file, plain or gzipped.
absl::StatusOr<TraceAnalysis> AnalyzeTraceFile(const std::string& path);

// Floating-point operations of one call from its input shapes, counting a multiply-add as two:
// matrix products (aten::mm, addmm, bmm, baddbmm) as torch.profiler's with_flops counts them,
// and the scaled-dot-product attention kernels' forward and backward as
// torch.utils.flop_counter counts them. 0 for other ops or shapes that do not fit.
double OpFlops(absl::string_view name, const nlohmann::json& input_dims);

// The `rows` ops with the most self time, one line each, with a header and the share of step
// time the shown ops that are InStepTime account for.
std::string FormatOpTable(const TraceAnalysis& analysis, size_t rows);

}  // namespace titan

#endif  // TITAN_LIB_PROFILING_TRACE_ANALYSIS_H_
