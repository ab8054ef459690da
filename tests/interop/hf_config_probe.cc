// hf_config_probe CONFIG_JSON
// Reads a Hugging Face config.json as titan's interop does and prints one JSON object: the model
// it describes (titan's args, bos and eos ids) and the RoPE inverse frequencies and attention
// factor titan computes for it. A refusal goes to stderr (exit 1). hf_config_reference_test.py
// compares them with transformers'.

#include <iostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/interop/hf_config.h"
#include "lib/model/rope.h"
#include "lib/util/json_file.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

absl::StatusOr<nlohmann::json> Probe(const std::string& path) {
  TITAN_ASSIGN_OR_RETURN(const nlohmann::json config, ReadJsonFile(path));
  TITAN_ASSIGN_OR_RETURN(const ModelInfo info, ModelInfoFromHfConfig(config, path));
  const RopeFrequencies rope = ComputeRopeFrequencies(info.args.rope, info.args.head_size());
  const at::Tensor inv_freq = rope.inv_freq.contiguous();
  return nlohmann::json{
      {"args", TransformerArgsToJson(info.args)},
      {"bos_token_id", info.bos_token_id},
      {"eos_token_id", info.eos_token_id},
      {"inv_freq", std::vector<double>(inv_freq.data_ptr<double>(),
                                       inv_freq.data_ptr<double>() + inv_freq.numel())},
      {"attention_factor", rope.attention_factor}};
}

}  // namespace
}  // namespace titan

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: hf_config_probe CONFIG_JSON\n";
    return 1;
  }
  const absl::StatusOr<nlohmann::json> probe = titan::Probe(argv[1]);
  if (!probe.ok()) {
    std::cerr << "hf_config_probe: " << probe.status().message() << "\n";
    return 1;
  }
  std::cout << probe->dump() << "\n";
  return 0;
}
