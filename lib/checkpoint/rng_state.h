#ifndef TITAN_LIB_CHECKPOINT_RNG_STATE_H_
#define TITAN_LIB_CHECKPOINT_RNG_STATE_H_

// The random number generator state a resumed run needs to continue bitwise identically.

#include <ATen/ATen.h>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace titan {

// The default CPU generator's state as a uint8 tensor (a copy).
at::Tensor GetCpuRngState();

// Restores a state from GetCpuRngState; an error (not a crash) for a malformed state.
absl::Status SetCpuRngState(const at::Tensor& state);

// The generator states as a JSON object ({"cpu": <base64>}) for CheckpointState::extra["rng"].
nlohmann::json CaptureRngState();

// Restores what CaptureRngState captured; errors name the key that is wrong.
absl::Status RestoreRngState(const nlohmann::json& rng);

}  // namespace titan

#endif  // TITAN_LIB_CHECKPOINT_RNG_STATE_H_
