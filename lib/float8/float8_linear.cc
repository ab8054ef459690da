#include "lib/float8/float8_linear.h"

#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "lib/kernels/float8_cast.h"
#include "lib/model/autocast.h"
#include "lib/model/mixed_precision_linear.h"
#include "lib/model/op_cache.h"
#include "lib/model/tensor_memo.h"

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr double kAmaxFloor = 1e-12;  // an all-zero tensor still gets a finite scale

bool IsRowMajor(const at::Tensor& t) { return t.stride(1) == 1 && t.stride(0) == t.size(1); }
bool IsColumnMajor(const at::Tensor& t) { return t.stride(0) == 1 && t.stride(1) == t.size(0); }

// How one operand of one of the three matmuls is cast: its float8 format and the axis it is
// scaled along (unset: one scale for the tensor).
struct Cast {
  at::ScalarType dtype = at::kFloat8_e4m3fn;
  std::optional<int64_t> axis;
};

// The casts of a recipe, named after torchao's cast configs.
struct RecipeCasts {
  Cast input, weight;                             // output = input @ weightᵀ
  Cast grad_output_for_input, weight_for_input;   // grad_input = grad_output @ weight
  Cast grad_output_for_weight, input_for_weight;  // grad_weight = grad_outputᵀ @ input
  bool high_precision_grad_weight = false;
  bool power_of_2_scales = false;
};

bool operator==(const Cast& a, const Cast& b) { return a.dtype == b.dtype && a.axis == b.axis; }

RecipeCasts CastsOf(Float8Recipe recipe) {
  RecipeCasts c;
  if (recipe == Float8Recipe::kTensorwise) {
    const Cast e5m2{at::kFloat8_e5m2, std::nullopt};
    c.grad_output_for_input = c.grad_output_for_weight = e5m2;
    return c;  // the rest e4m3, one scale per tensor
  }
  // Rowwise: each operand scaled along the dim its matmul contracts (rows of [M, K], columns of
  // [K, N]), all e4m3.
  c.input = c.weight = c.grad_output_for_input = {at::kFloat8_e4m3fn, -1};
  c.weight_for_input = c.grad_output_for_weight = c.input_for_weight = {at::kFloat8_e4m3fn, 0};
  c.power_of_2_scales = true;
  if (recipe == Float8Recipe::kRowwiseWithGwHp) {
    c.weight_for_input = Cast{};
    c.high_precision_grad_weight = true;
  }
  return c;
}

at::Tensor AmaxOf(const at::Tensor& hp, std::optional<int64_t> axis) {
  at::NoGradGuard no_grad;
  // The infinity norm: one reduction pass with |x| inside it, no |hp| tensor written first.
  const double inf = std::numeric_limits<double>::infinity();
  return axis ? at::linalg_vector_norm(hp, inf, {*axis}, /*keepdim=*/true)
              : at::linalg_vector_norm(hp, inf);
}

// The scale of `hp` (2-D) cast as `cast` says, with its reciprocal where one GPU launch makes
// both (lib/kernels; ATen's ops take five, and one per reciprocal); `split_dim`: the dim of `hp`
// split over tensor-parallel ranks, whose maxima `options.reduce_max` completes.
Float8Scales ScaleFor(const at::Tensor& hp, const Cast& cast, bool power_of_2_scales,
                      std::optional<int64_t> split_dim, const Float8LinearOptions& options) {
  at::Tensor amax = AmaxOf(hp, cast.axis);
  const bool over_split = split_dim && (!cast.axis || (*cast.axis + 2) % 2 == *split_dim);
  if (over_split && options.reduce_max) options.reduce_max(amax);
  if (!power_of_2_scales && amax.is_cuda() && FusedFloat8ScalesSupports(amax).ok()) {
    return FusedFloat8ScalesFromAmax(amax, cast.dtype);
  }
  return {Float8ScaleOf(amax, cast.dtype, power_of_2_scales), at::Tensor()};
}

// `hp` cast with s.scale, carrying the reciprocal ScaleFor made with it (if any).
Float8Tensor CastWithScales(const at::Tensor& hp, at::ScalarType dtype, const Float8Scales& s) {
  Float8Tensor out = CastWithScale(hp, dtype, s.scale);
  out.inverse_scale = s.inverse;
  return out;
}

Float8Tensor CastAs(const at::Tensor& hp, const Cast& cast, bool power_of_2_scales,
                    std::optional<int64_t> split_dim, const Float8LinearOptions& options) {
  return CastWithScales(hp, cast.dtype, ScaleFor(hp, cast, power_of_2_scales, split_dim, options));
}

// One cast in both of _scaled_mm's operand layouts, for an operand one matmul takes row-major and
// another column-major: on a GPU one pass writes both, where a cast and a transposing copy of
// float8 bytes cost about twice the time.
struct Float8Layouts {
  Float8Tensor row_major, column_major;
};
Float8Layouts CastAsBothLayouts(const at::Tensor& hp, const Cast& cast, bool power_of_2_scales,
                                std::optional<int64_t> split_dim,
                                const Float8LinearOptions& options) {
  const Float8Scales s = ScaleFor(hp, cast, power_of_2_scales, split_dim, options);
  if (hp.is_cuda() && FusedFloat8CastSupports(hp, s.scale, cast.dtype).ok()) {
    Float8CastLayouts layouts = FusedScaledCastToFloat8BothLayouts(hp, s.scale, cast.dtype);
    return {{std::move(layouts.row_major), s.scale, s.inverse},
            {std::move(layouts.column_major), s.scale, s.inverse}};
  }
  Float8Tensor row_major = CastWithScales(hp, cast.dtype, s);
  Float8Tensor column_major{row_major.data.t().contiguous().t(), s.scale, s.inverse};
  return {std::move(row_major), std::move(column_major)};
}

// `hp` cast as `cast` says for forward's matmul; given `column_major`, the same cast is also
// written there in the layout backward's matmul takes (one pass on a GPU).
Float8Tensor CastForForward(const at::Tensor& hp, const Cast& cast, bool power_of_2_scales,
                            std::optional<int64_t> split_dim, const Float8LinearOptions& options,
                            Float8Tensor* column_major) {
  if (column_major == nullptr) return CastAs(hp, cast, power_of_2_scales, split_dim, options);
  Float8Layouts layouts = CastAsBothLayouts(hp, cast, power_of_2_scales, split_dim, options);
  *column_major = std::move(layouts.column_major);
  return std::move(layouts.row_major);
}

// How an input was cast for forward: its dtype before float8, then the cast and its scale's
// reduction over tensor-parallel ranks.
struct InputCastKey {
  at::ScalarType dtype = at::kFloat;
  Cast cast;
  bool power_of_2_scales = false;
  std::optional<int64_t> split_dim;
  bool reduced = false;
  bool with_column_major = false;
  bool operator==(const InputCastKey& other) const {
    return dtype == other.dtype && cast == other.cast &&
           power_of_2_scales == other.power_of_2_scales && split_dim == other.split_dim &&
           reduced == other.reduced && with_column_major == other.with_column_major;
  }
};
// This thread's last input cast: held until the next one (one input's float8 bytes, twice with
// the column-major layout).
thread_local TensorMemo<InputCastKey, Float8Layouts> g_last_input_cast;

// Forward's cast of x (any leading dims) in `dtype` then float8, and its column-major layout when
// `column_major` is given: the previous call's when x is the same unchanged tensor cast alike, so
// that wq, wk and wv (w1 and w3) cast (and, under tensor parallelism, reduce the maximum of) their
// shared input once.
Float8Tensor CastInput(const at::Tensor& x, at::ScalarType dtype, const Cast& cast,
                       bool power_of_2_scales, std::optional<int64_t> split_dim,
                       const Float8LinearOptions& options, Float8Tensor* column_major) {
  const InputCastKey key{dtype,
                         cast,
                         power_of_2_scales,
                         split_dim,
                         static_cast<bool>(options.reduce_max),
                         column_major != nullptr};
  if (const Float8Layouts* last = g_last_input_cast.Find(x, key)) {
    if (column_major != nullptr) *column_major = last->column_major;
    return last->row_major;
  }
  const at::Tensor x2d = CastInputOnce(x, dtype).reshape({-1, x.size(-1)});
  Float8Layouts layouts;
  layouts.row_major = CastForForward(x2d, cast, power_of_2_scales, split_dim, options,
                                     column_major != nullptr ? &layouts.column_major : nullptr);
  if (column_major != nullptr) *column_major = layouts.column_major;
  g_last_input_cast.Store(x, key, layouts);
  return layouts.row_major;
}

// The dtype a float8 gradient matmul writes for a tensor of `dtype`: tensorwise's _scaled_mm
// writes it from its fp32 accumulator (an fp32 weight's or autocast input's gradient, without a
// bf16 rounding and a cast pass); emulation keeps torchao's rounding to the output gradient's
// dtype, and rowwise's kernel writes bf16 only.
at::ScalarType GradientMatmulDtype(const Float8LinearOptions& options, at::ScalarType dtype,
                                   at::ScalarType grad_dtype) {
  const bool writes = options.recipe == Float8Recipe::kTensorwise && !options.emulate &&
                      (dtype == at::kFloat || dtype == grad_dtype);  // not fp64, say
  return writes ? dtype : grad_dtype;
}

// `row_major` (2-D float8) with zero columns appended up to a multiple of 16: _scaled_mm on CUDA
// needs the contracted dim so, and a step's token count (grad_weight's) need not be. Zero bytes
// are +0 in both formats and add nothing to the sums; scales do not depend on this dim.
at::Tensor PadColumnsTo16(const at::Tensor& row_major) {
  const int64_t pad = (16 - row_major.size(1) % 16) % 16;
  if (pad == 0) return row_major;
  return at::constant_pad_nd(row_major.view(at::kByte), {0, pad}, 0).view(row_major.scalar_type());
}

// Weights FSDP gathered in float8 (RegisterFloat8Weight), by tensor identity.
std::mutex registry_mutex;
std::unordered_map<const c10::TensorImpl*, Float8Tensor>& Registry() {
  static auto* registry = new std::unordered_map<const c10::TensorImpl*, Float8Tensor>();
  return *registry;
}

std::optional<Float8Tensor> RegisteredCast(const at::Tensor& weight) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = Registry().find(weight.unsafeGetTensorImpl());
  if (it == Registry().end()) return std::nullopt;
  return it->second;
}

// The transpose of a cast tensor, its scales transposed alike ([1, N] column scales become
// [N, 1]).
Float8Tensor Transposed(const Float8Tensor& t) {
  const auto transposed = [](const at::Tensor& s) {
    return s.defined() && s.dim() == 2 ? s.t() : s;
  };
  return {t.data.t(), transposed(t.scale), transposed(t.inverse_scale)};
}

// Which dim of each 2-D operand tensor parallelism splits (see Float8LinearOptions::split_dim).
struct SplitDims {
  std::optional<int64_t> input, weight, grad_output;
};
SplitDims SplitDimsOf(const Float8LinearOptions& options) {
  SplitDims dims;
  dims.weight = options.split_dim;
  if (options.split_dim == 1) dims.input = 1;        // row-parallel: inputs are column slices
  if (options.split_dim == 0) dims.grad_output = 1;  // column-parallel: outputs are
  return dims;
}

// Backward's operands: forward's casts where the recipe casts an operand alike for both of its
// matmuls (tensorwise), kept column-major, the layout backward's matmul takes them in; otherwise
// the high-precision tensor, cast again in backward.
enum SavedSlot {
  kX,
  kWeight,
  kInputCast,
  kInputScale,
  kInputInverseScale,
  kWeightCast,
  kWeightScale,
  kWeightInverseScale,
  kSlots
};

struct Float8LinearFunction : public torch::autograd::Function<Float8LinearFunction> {
  // x in its own dtype, cast to `dtype` (autocast's) before float8: its gradient comes back in
  // x's dtype. `training`: a backward will follow (autograd records this call).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            at::ScalarType dtype, const std::optional<at::Tensor>& kept_output,
                            const Float8LinearOptions* options, bool training) {
    const RecipeCasts casts = CastsOf(options->recipe);
    // The options outlive the graph (Float8Linear's contract); a plain address needs no
    // custom-class registration.
    ctx->saved_data["options"] = reinterpret_cast<int64_t>(options);
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    // A weight gathered in float8 comes with its cast, which backward reuses (tensorwise only).
    const std::optional<Float8Tensor> gathered =
        options->recipe == Float8Recipe::kTensorwise ? RegisteredCast(weight) : std::nullopt;
    // A cast is kept only for the gradient that reads it: the input's for the weight's gradient,
    // the weight's for the input's.
    const bool computes = training && !kept_output;
    const bool keep_input = computes && weight.requires_grad() &&
                            casts.input == casts.input_for_weight &&
                            !casts.high_precision_grad_weight;
    const bool keep_weight = computes && options->keep_weight_cast && !gathered &&
                             x.requires_grad() && casts.weight == casts.weight_for_input;
    std::vector<at::Tensor> saved(kSlots);
    if (!keep_input) saved[kX] = CastInputOnce(x, dtype);  // one copy for the linears sharing x
    if (!keep_weight && !gathered) saved[kWeight] = weight;
    if (gathered) {
      saved[kWeightCast] = gathered->data;
      saved[kWeightScale] = gathered->scale;
      saved[kWeightInverseScale] = gathered->inverse_scale;
    }
    if (kept_output) {
      ctx->save_for_backward(saved);
      return kept_output->detach();
    }
    // The casts and matmuls run as written: autocast would turn the emulated fp32 mm into bf16.
    AutocastScope no_autocast(x.device().type(), std::nullopt);
    const SplitDims split = SplitDimsOf(*options);
    const bool pow2 = casts.power_of_2_scales;
    Float8Tensor kept_input, kept_weight;
    const Float8Tensor input = CastInput(x, dtype, casts.input, pow2, split.input, *options,
                                         keep_input ? &kept_input : nullptr);
    const Float8Tensor weight8 =
        gathered ? *gathered
                 : CastForForward(weight, casts.weight, pow2, split.weight, *options,
                                  keep_weight ? &kept_weight : nullptr);
    if (keep_input) {
      saved[kInputCast] = kept_input.data;
      saved[kInputScale] = kept_input.scale;
      saved[kInputInverseScale] = kept_input.inverse_scale;
    }
    if (keep_weight) {
      saved[kWeightCast] = kept_weight.data;
      saved[kWeightScale] = kept_weight.scale;
      saved[kWeightInverseScale] = kept_weight.inverse_scale;
    }
    ctx->save_for_backward(saved);
    const at::Tensor out = Float8Matmul(input, Transposed(weight8), dtype,
                                        /*use_fast_accum=*/true, options->emulate);
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = weight.size(0);
    return out.view(shape);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& options =
        *reinterpret_cast<const Float8LinearOptions*>(ctx->saved_data["options"].toInt());
    const RecipeCasts casts = CastsOf(options.recipe);
    const SplitDims split = SplitDimsOf(options);
    const bool pow2 = casts.power_of_2_scales;
    const std::vector<int64_t> x_sizes = ctx->saved_data["x_sizes"].toIntVector();
    const auto weight_dtype = static_cast<at::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const auto x_dtype = static_cast<at::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const at::Tensor& x = saved[kX];
    const at::Tensor& weight = saved[kWeight];
    std::optional<Float8Tensor> input8, weight8;
    if (saved[kInputCast].defined()) {
      input8 = Float8Tensor{saved[kInputCast], saved[kInputScale], saved[kInputInverseScale]};
    }
    if (saved[kWeightCast].defined()) {
      weight8 = Float8Tensor{saved[kWeightCast], saved[kWeightScale], saved[kWeightInverseScale]};
    }
    const int64_t out_features = grad_outputs[0].size(-1);
    AutocastScope no_autocast(grad_outputs[0].device().type(), std::nullopt);
    const at::Tensor grad = grad_outputs[0].reshape({-1, out_features});

    // Each gradient only where asked for: a zero-bubble pipeline's I and W passes ask for one.
    const bool want_x = ctx->needs_input_grad(0), want_weight = ctx->needs_input_grad(1);
    const bool weight_in_float8 = want_weight && !casts.high_precision_grad_weight;
    // Tensorwise casts the output gradient alike for both matmuls: once, in both layouts.
    std::optional<Float8Tensor> grad_for_input, grad_for_weight;
    if (weight_in_float8 &&
        (!want_x || casts.grad_output_for_input == casts.grad_output_for_weight)) {
      Float8Layouts layouts =
          CastAsBothLayouts(grad, casts.grad_output_for_weight, pow2, split.grad_output, options);
      grad_for_weight = std::move(layouts.column_major);
      if (want_x) grad_for_input = std::move(layouts.row_major);
    }
    at::Tensor grad_x;
    if (want_x) {
      if (!weight8) weight8 = CastAs(weight, casts.weight_for_input, pow2, split.weight, options);
      if (!grad_for_input) {
        grad_for_input =
            CastAs(grad, casts.grad_output_for_input, pow2, split.grad_output, options);
      }
      grad_x = Float8Matmul(*grad_for_input, *weight8,
                            GradientMatmulDtype(options, x_dtype, grad.scalar_type()),
                            /*use_fast_accum=*/false, options.emulate)
                   .to(x_dtype)
                   .view(x_sizes);
    }
    at::Tensor grad_weight;
    if (want_weight) {
      const at::Tensor x2d = x.defined() ? x.reshape({-1, x.size(-1)}) : at::Tensor();
      if (casts.high_precision_grad_weight) {
        grad_weight = grad.t().mm(x2d);
      } else {
        if (!grad_for_weight) {
          grad_for_weight =
              CastAs(grad, casts.grad_output_for_weight, pow2, split.grad_output, options);
        }
        if (!input8) input8 = CastAs(x2d, casts.input_for_weight, pow2, split.input, options);
        grad_weight = Float8Matmul(Transposed(*grad_for_weight), *input8,
                                   GradientMatmulDtype(options, weight_dtype, grad.scalar_type()),
                                   /*use_fast_accum=*/false, options.emulate);
      }
      grad_weight = grad_weight.to(weight_dtype);
    }
    return {grad_x, grad_weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

absl::StatusOr<Float8Recipe> ParseFloat8Recipe(absl::string_view name) {
  if (name.empty() || name == "tensorwise") return Float8Recipe::kTensorwise;
  if (name == "rowwise") return Float8Recipe::kRowwise;
  if (name == "rowwise_with_gw_hp") return Float8Recipe::kRowwiseWithGwHp;
  return absl::InvalidArgumentError(absl::StrCat(
      "[float8] recipe_name: expected tensorwise, rowwise or rowwise_with_gw_hp, got \"", name,
      "\""));
}

std::string Float8RecipeName(Float8Recipe recipe) {
  switch (recipe) {
    case Float8Recipe::kTensorwise:
      return "tensorwise";
    case Float8Recipe::kRowwise:
      return "rowwise";
    case Float8Recipe::kRowwiseWithGwHp:
      return "rowwise_with_gw_hp";
  }
  return "tensorwise";
}

at::Tensor Float8ScaleOf(const at::Tensor& amax, at::ScalarType dtype, bool power_of_2_scales) {
  at::NoGradGuard no_grad;
  // In float64 and as reciprocal × max, torchao's own arithmetic, so the scales agree to the bit.
  at::Tensor scale =
      (amax.to(at::kDouble).clamp_min(kAmaxFloor).reciprocal() * Float8MaxOf(dtype)).to(at::kFloat);
  if (power_of_2_scales) scale = at::exp2(at::floor(at::log2(scale)));
  return scale;
}

Float8Tensor CastWithScale(const at::Tensor& hp, at::ScalarType dtype, const at::Tensor& scale) {
  at::NoGradGuard no_grad;
  // On an H100/H200 one pass (lib/kernels); elsewhere, the CPU included, ATen's composition, the
  // kernel's reference.
  if (hp.is_cuda() && FusedFloat8CastSupports(hp, scale, dtype).ok()) {
    return {FusedScaledCastToFloat8(hp, scale, dtype), scale};
  }
  const double max = Float8MaxOf(dtype);
  // Saturate first: an fp32 value just past the format's max would otherwise cast to NaN.
  return {(hp.to(at::kFloat) * scale).clamp(-max, max).to(dtype), scale};
}

Float8Tensor CastToFloat8(const at::Tensor& hp, at::ScalarType dtype, std::optional<int64_t> axis,
                          bool power_of_2_scales) {
  at::NoGradGuard no_grad;
  return CastWithScale(hp, dtype, Float8ScaleOf(AmaxOf(hp, axis), dtype, power_of_2_scales));
}

at::Tensor Float8Matmul(const Float8Tensor& a, const Float8Tensor& b, at::ScalarType out_dtype,
                        bool use_fast_accum, bool emulate) {
  at::NoGradGuard no_grad;
  if (emulate) {
    return at::mm(a.data.to(at::kFloat) / a.scale, b.data.to(at::kFloat) / b.scale).to(out_dtype);
  }
  // _scaled_mm wants a row-major and b column-major, and both scaled alike (a tensorwise scale
  // next to a rowwise one is repeated along its rows or columns).
  const at::Tensor a_data = PadColumnsTo16(IsRowMajor(a.data) ? a.data : a.data.contiguous());
  const at::Tensor b_data =
      PadColumnsTo16(IsColumnMajor(b.data) ? b.data.t() : b.data.t().contiguous()).t();
  at::Tensor a_inverse = a.inverse_scale.defined() ? a.inverse_scale : a.scale.reciprocal();
  at::Tensor b_inverse = b.inverse_scale.defined() ? b.inverse_scale : b.scale.reciprocal();
  const bool a_rows = a.scale.dim() == 2;
  const bool b_columns = b.scale.dim() == 2;
  if (a_rows && !b_columns) b_inverse = b_inverse.reshape({1, 1}).expand({1, b.data.size(1)});
  if (!a_rows && b_columns) a_inverse = a_inverse.reshape({1, 1}).expand({a.data.size(0), 1});
  const bool rowwise = a_rows || b_columns;
  const bool cuda = a.data.is_cuda();
  // Rowwise scaling is slow without fast accumulation, where the tensorwise kernel with unit
  // scales and the scales applied after is faster (as torchao); that kernel writes any output
  // dtype, the rowwise one bf16 here.
  const bool scale_after = rowwise && !use_fast_accum;
  const at::ScalarType mm_dtype =
      rowwise && !scale_after && out_dtype != at::kBFloat16 ? at::kBFloat16 : out_dtype;
  at::Tensor a_mm_scale = a_inverse.contiguous();
  at::Tensor b_mm_scale = b_inverse.contiguous();
  if (scale_after) a_mm_scale = b_mm_scale = at::ones({}, a_inverse.options());
  at::Tensor out = at::_scaled_mm(a_data, b_data, a_mm_scale, b_mm_scale, std::nullopt,
                                  std::nullopt, mm_dtype, use_fast_accum && cuda);
  // One factor at a time, in place: torchao multiplies by their [M, N] product, an fp32 tensor
  // as large as the output; the scales are powers of 2 (rowwise recipes), so the bits agree.
  if (scale_after) out.mul_(a_inverse).mul_(b_inverse);
  return out.to(out_dtype);
}

void RegisterFloat8Weight(const at::Tensor& weight, Float8Tensor cast) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  Registry()[weight.unsafeGetTensorImpl()] = std::move(cast);
}

void UnregisterFloat8Weight(const at::Tensor& weight) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  Registry().erase(weight.unsafeGetTensorImpl());
}

at::Tensor Float8Linear(const at::Tensor& x, const at::Tensor& weight,
                        const Float8LinearOptions& options, const at::Tensor& kept_output) {
  // As F.linear under autocast: the input in autocast's dtype (cast inside, once for the linears
  // sharing it), the fp32 weight cast straight to float8.
  const std::optional<at::Tensor> kept =
      kept_output.defined() ? std::optional<at::Tensor>(kept_output) : std::nullopt;
  const bool training = at::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
  return Float8LinearFunction::apply(x, weight, AutocastDtype(x), kept, &options, training);
}

}  // namespace titan
