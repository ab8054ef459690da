#include "lib/profiling/phase_range.h"

namespace titan {

PhaseRange::PhaseRange(std::string_view name) : range_(at::RecordScope::USER_SCOPE) {
  if (range_.isActive()) range_.before(name);
}

}  // namespace titan
