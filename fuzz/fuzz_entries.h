#ifndef TITAN_FUZZ_FUZZ_ENTRIES_H_
#define TITAN_FUZZ_FUZZ_ENTRIES_H_

// The parsers convert_checkpoint and checkpoint_inspect run on untrusted file bytes, one entry per
// fuzz target. libFuzzer drivers (fuzz/fuzzer_main.cc, built by fuzz/run_fuzzers.sh) and the corpus
// regression test (fuzz/corpus_test.cc) call the same entries.

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace titan {

struct FuzzTarget {
  const char* name;  // Also the corpus folder: fuzz/corpus/<name>/.
  absl::Status (*parse)(absl::string_view bytes);
};

// safetensors_header: a whole .safetensors file's bytes through ParseSafetensorsHeader.
// hf_config:          config.json text through ModelInfoFromHfConfig (every registered family).
// hf_index:           model.safetensors.index.json text through ParseHfIndex.
// meta_pth:           consolidated.00.pth bytes (zip + pickle) through ParseTorchStateDict.
const std::vector<FuzzTarget>& FuzzTargets();

}  // namespace titan

#endif  // TITAN_FUZZ_FUZZ_ENTRIES_H_
