#ifndef TITAN_LIB_FLOAT8_FLOAT8_CONVERTER_H_
#define TITAN_LIB_FLOAT8_FLOAT8_CONVERTER_H_

#include <ATen/ATen.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/float8/float8_linear.h"
#include "lib/model/module.h"

namespace titan {

// torchtitan's [float8] section, for model.converters = ["float8"].
struct Float8ConverterOptions {
  Float8LinearOptions linear;
  // Linear layers whose name contains any of these stay in high precision (torchtitan's
  // substring match: "output" keeps the head, "attention.wq" every layer's wq).
  std::vector<std::string> filter_fqns;
  // Tensor parallelism: the dim the plan splits a weight along (by parameter name, e.g.
  // "layers.0.attention.wq.weight"; none: replicated), and the group's in-place MAX all-reduce.
  std::function<std::optional<int64_t>(const std::string& weight_name)> split_dim_of;
  std::function<void(at::Tensor& amax)> reduce_max;
};

// Whether float8 matmuls can run on `device` for `options` as asked: at::_scaled_mm needs an
// sm_89+ GPU; elsewhere (CPU included) `emulate` must be set. Also refuses batch-invariant mode
// (float8 casts scale by a whole tensor's or row's magnitude).
absl::Status CheckFloat8Support(const Float8LinearOptions& options, const at::Device& device);

// Refuses a filter_fqns entry that no linear layer's name of `model` contains (a typo would
// convert every layer), and an empty one (every name contains it: nothing would convert). Call on
// the whole model: a pipeline stage lacks the other stages' layers.
absl::Status CheckFloat8Filters(Module& model, const std::vector<std::string>& filter_fqns);

// The "float8" model converter: every linear layer of `model` not filtered out, with both
// weight dims multiples of 16 (the float8 kernels' requirement; others are kept and logged, as
// torchtitan), computes in float8 (Float8Linear). Call on the whole, unsharded shapes (meta is
// fine), before parallelize. Returns the converted layers' names.
absl::StatusOr<std::vector<std::string>> ConvertToFloat8(Module& model,
                                                         const Float8ConverterOptions& options,
                                                         const at::Device& device);

}  // namespace titan

#endif  // TITAN_LIB_FLOAT8_FLOAT8_CONVERTER_H_
