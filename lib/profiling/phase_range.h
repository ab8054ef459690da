#ifndef TITAN_LIB_PROFILING_PHASE_RANGE_H_
#define TITAN_LIB_PROFILING_PHASE_RANGE_H_

#include <ATen/record_function.h>

#include <string>
#include <string_view>

namespace titan {

// A named range in profiler traces for as long as the object lives: the trainer puts one around
// "forward", "backward", "optimizer" and "checkpoint", a communicator around each collective. It is
// a user-scope at::RecordFunction, what torch.profiler.record_function emits; when no profiler is
// recording it costs one thread-local check and records nothing.
class PhaseRange {
 public:
  explicit PhaseRange(std::string_view name);
  // Named <prefix><name><suffix>; the name is only assembled while a profiler records.
  PhaseRange(std::string_view prefix, std::string_view name, std::string_view suffix);

  PhaseRange(const PhaseRange&) = delete;
  PhaseRange& operator=(const PhaseRange&) = delete;

 private:
  at::RecordFunction range_;  // its destructor ends the range
};

}  // namespace titan

#endif  // TITAN_LIB_PROFILING_PHASE_RANGE_H_
