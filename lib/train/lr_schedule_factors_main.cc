// Test helper: for each stdin line "<training_steps> <warmup_steps> <decay_ratio> <decay_type>
// <min_lr_factor>" prints "<warmup> <stable> <decay> <factor(0)> ... <factor(training_steps)>"
// with round-trip precision.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "lib/train/lr_scheduler.h"

int main() {
  std::string line;
  for (int line_number = 1; std::getline(std::cin, line); ++line_number) {
    const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t steps = 0;
    int64_t warmup = 0;
    double decay_ratio = 0;
    double min_lr_factor = 0;
    if (fields.size() != 5 || !absl::SimpleAtoi(fields[0], &steps) ||
        !absl::SimpleAtoi(fields[1], &warmup) || !absl::SimpleAtod(fields[2], &decay_ratio) ||
        !absl::SimpleAtod(fields[4], &min_lr_factor)) {
      std::cerr << "stdin:" << line_number << ": expected 5 fields, got \"" << line << "\"\n";
      return 1;
    }
    absl::StatusOr<titan::WarmupStableDecaySchedule> schedule =
        titan::WarmupStableDecaySchedule::Create(steps, warmup, decay_ratio, fields[3],
                                                 min_lr_factor);
    if (!schedule.ok()) {
      std::cerr << "stdin:" << line_number << ": " << schedule.status() << "\n";
      return 1;
    }
    std::printf("%lld %lld %lld", static_cast<long long>(schedule->warmup_steps()),
                static_cast<long long>(schedule->stable_steps()),
                static_cast<long long>(schedule->decay_steps()));
    for (int64_t step = 0; step <= steps; ++step) std::printf(" %.17g", schedule->Factor(step));
    std::printf("\n");
  }
  return 0;
}
