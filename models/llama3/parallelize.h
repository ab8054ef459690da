#ifndef TITAN_MODELS_LLAMA3_PARALLELIZE_H_
#define TITAN_MODELS_LLAMA3_PARALLELIZE_H_

#include <string>

#include "absl/status/status.h"
#include "models/llama3/model.h"

namespace titan {

// torchtitan's [activation_checkpoint]: mode "none", "full" (every block), or "selective" with
// selective_ac_option = N (every Nth block: N-1, 2N-1, ... as torchtitan). Op-level selective AC ("op")
// needs per-op policies LibTorch's C++ autograd does not expose; it is rejected with that reason.
absl::Status ApplyActivationCheckpointing(Llama3Model& model, const std::string& mode,
                                          const std::string& selective_ac_option);

}  // namespace titan

#endif  // TITAN_MODELS_LLAMA3_PARALLELIZE_H_
