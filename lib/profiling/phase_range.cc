#include "lib/profiling/phase_range.h"

namespace titan {

PhaseRange::PhaseRange(std::string_view name) : range_(at::RecordScope::USER_SCOPE) {
  if (range_.isActive()) range_.before(name);
}

PhaseRange::PhaseRange(std::string_view prefix, std::string_view name, std::string_view suffix)
    : range_(at::RecordScope::USER_SCOPE) {
  if (!range_.isActive()) return;
  std::string full;
  full.reserve(prefix.size() + name.size() + suffix.size());
  full.append(prefix).append(name).append(suffix);
  range_.before(full);
}

}  // namespace titan
