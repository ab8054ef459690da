#include "fuzz/fuzz_entries.h"

#include <string>

#include "lib/checkpoint/safetensors.h"
#include "lib/interop/checkpoint_reader.h"
#include "lib/interop/hf_config.h"
#include "lib/interop/torch_state_dict.h"
#include "nlohmann/json.hpp"

namespace titan {
namespace {

absl::Status ParseSafetensors(absl::string_view bytes) {
  return ParseSafetensorsHeader(bytes, "fuzz.safetensors").status();
}

absl::Status ParseHfConfig(absl::string_view bytes) {
  const nlohmann::json config = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) return absl::InvalidArgumentError("config.json: not valid JSON");
  return ModelInfoFromHfConfig(config, "config.json").status();
}

absl::Status ParseIndex(absl::string_view bytes) {
  return ParseHfIndex(bytes, "model.safetensors.index.json").status();
}

absl::Status ParseMetaPth(absl::string_view bytes) {
  return ParseTorchStateDict(bytes, "consolidated.00.pth").status();
}

}  // namespace

const std::vector<FuzzTarget>& FuzzTargets() {
  static const auto* const targets = new std::vector<FuzzTarget>{
      {"safetensors_header", ParseSafetensors},
      {"hf_config", ParseHfConfig},
      {"hf_index", ParseIndex},
      {"meta_pth", ParseMetaPth},
  };
  return *targets;
}

}  // namespace titan
