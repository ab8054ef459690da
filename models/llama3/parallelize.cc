#include "models/llama3/parallelize.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/parallel/activation_checkpoint.h"

namespace titan {

absl::Status ApplyActivationCheckpointing(Llama3Model& model, const std::string& mode,
                                          const std::string& selective_ac_option) {
  int64_t every = 0;
  if (mode == "none") return absl::OkStatus();
  if (mode == "full") {
    every = 1;
  } else if (mode == "selective") {
    if (selective_ac_option == "op") {
      return absl::UnimplementedError(
          "[activation_checkpoint] selective_ac_option: \"op\" (per-op policy) is not supported by "
          "LibTorch's C++ autograd; use an integer N to checkpoint every Nth layer");
    }
    if (!absl::SimpleAtoi(selective_ac_option, &every) || every < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[activation_checkpoint] selective_ac_option: expected a positive integer N, got \"",
          selective_ac_option, "\""));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "[activation_checkpoint] mode: expected none, selective or full, got \"", mode, "\""));
  }
  for (int64_t layer = 0; layer < model.num_layers(); ++layer) {
    if ((layer + 1) % every != 0) continue;  // torchtitan counts layers from 1
    model.SetLayerWrapper(layer, [](const Llama3Model::LayerCall& call, const at::Tensor& x) {
      return CheckpointedCall(call, x);
    });
  }
  return absl::OkStatus();
}

}  // namespace titan
