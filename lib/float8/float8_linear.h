#ifndef TITAN_LIB_FLOAT8_FLOAT8_LINEAR_H_
#define TITAN_LIB_FLOAT8_FLOAT8_LINEAR_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace titan {

// torchao's float8 training recipes (torchtitan's [float8] recipe_name), with dynamic scaling:
//  - tensorwise: one scale per tensor; inputs and weights in e4m3, output gradients in e5m2;
//  - rowwise: one scale per row of each matmul operand (along the contracted dim), all e4m3,
//    scales rounded down to a power of 2;
//  - rowwise_with_gw_hp: rowwise, but the weight gradient is computed in high precision.
enum class Float8Recipe { kTensorwise, kRowwise, kRowwiseWithGwHp };
// "" and "tensorwise", "rowwise", "rowwise_with_gw_hp".
absl::StatusOr<Float8Recipe> ParseFloat8Recipe(absl::string_view name);
std::string Float8RecipeName(Float8Recipe recipe);

struct Float8LinearOptions {
  Float8Recipe recipe = Float8Recipe::kTensorwise;
  // Dequantise and multiply in fp32 instead of at::_scaled_mm (torchao's emulate): for hardware
  // without the kernel (rowwise on CPU, GPUs before sm_89). Same casts, same rounding of operands.
  bool emulate = false;
  // Tensor parallelism: the dim of the [out, in] weight split over ranks (0: column-parallel,
  // 1: row-parallel) and an in-place MAX all-reduce over them. Every maximum taken over a split
  // dim (the weight's, a row-parallel input's, a column-parallel output gradient's) is reduced,
  // so each rank casts with the scales one process would use.
  std::optional<int64_t> split_dim;
  std::function<void(at::Tensor& amax)> reduce_max;
  // Tensorwise: backward takes forward's float8 cast of the weight instead of casting it again,
  // at one byte per weight element held from each forward to its backward. For a weight that
  // stays resident with one forward in flight; not under FSDP (which frees the gathered weight
  // after forward) or pipeline parallelism (several microbatches in flight).
  bool keep_weight_cast = false;
};

// A float8 tensor and the fp32 factor that scaled it into float8's range (data ≈ hp · scale):
// one number (tensorwise), or one per row or column in keepdim shape (axiswise).
struct Float8Tensor {
  at::Tensor data;
  at::Tensor scale;
  at::Tensor inverse_scale;  // 1 / scale in fp32 where made with it (else taken when needed)
};

// The scale that puts `amax` (fp32 or fp64 magnitudes) on `dtype`'s largest finite value, as fp32.
at::Tensor Float8ScaleOf(const at::Tensor& amax, at::ScalarType dtype, bool power_of_2_scales);
// `hp` × `scale`, saturated and cast to `dtype`.
Float8Tensor CastWithScale(const at::Tensor& hp, at::ScalarType dtype, const at::Tensor& scale);

// `hp` scaled so that its largest magnitude (over the tensor, or along `axis` when set) lands on
// `dtype`'s largest finite value, then saturated and cast. `power_of_2_scales` rounds each scale
// down to a power of 2 (exact to undo).
Float8Tensor CastToFloat8(const at::Tensor& hp, at::ScalarType dtype, std::optional<int64_t> axis,
                          bool power_of_2_scales);

// a [M, K] @ b [K, N] in `out_dtype`, from float8 operands scaled per tensor or a per row / b per
// column: at::_scaled_mm (fast accumulation when asked, CUDA only), or emulated in fp32.
at::Tensor Float8Matmul(const Float8Tensor& a, const Float8Tensor& b, at::ScalarType out_dtype,
                        bool use_fast_accum, bool emulate);

// FSDP's float8 all-gather (tensorwise recipe) hands a gathered weight's float8 cast to the
// linear that uses it: registered while the weight is unsharded, the cast replaces the linear's
// own (equal) cast of `weight`. Keyed by the tensor's identity; thread-safe.
void RegisterFloat8Weight(const at::Tensor& weight, Float8Tensor cast);
void UnregisterFloat8Weight(const at::Tensor& weight);

// x [..., in] @ weightᵀ (weight [out, in]) with the recipe's float8 matmuls for the output and
// both gradients; the output has x's dtype (after autocast's cast, as torchao's Float8Linear).
// `kept_output`: see LinearFn (lib/model/module.h). `options` must outlive the backward.
at::Tensor Float8Linear(const at::Tensor& x, const at::Tensor& weight,
                        const Float8LinearOptions& options, const at::Tensor& kept_output = {});

}  // namespace titan

#endif  // TITAN_LIB_FLOAT8_FLOAT8_LINEAR_H_
