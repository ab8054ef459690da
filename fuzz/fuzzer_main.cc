// libFuzzer driver for one entry of fuzz/fuzz_entries.h, chosen at compile time by
// -DTITAN_FUZZ_TARGET=\"<name>\" (fuzz/run_fuzzers.sh builds one binary per target).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "fuzz/fuzz_entries.h"

namespace {

const titan::FuzzTarget* target = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  for (const titan::FuzzTarget& candidate : titan::FuzzTargets()) {
    if (std::strcmp(candidate.name, TITAN_FUZZ_TARGET) == 0) target = &candidate;
  }
  if (target == nullptr) {
    std::fprintf(stderr, "no fuzz target named %s\n", TITAN_FUZZ_TARGET);
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The status is the parser's answer; only a crash, leak or sanitizer report is a finding.
  target->parse(absl::string_view(reinterpret_cast<const char*>(data), size)).IgnoreError();
  return 0;
}
