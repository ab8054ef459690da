#include "lib/kernels/float8_cast.h"

#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/kernels/float8_cast_math.h"
#include "lib/kernels/kernel_dispatch.h"
#include "lib/kernels/launch.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// `scale` as [rows or 1, cols or 1].
at::Tensor Scale2d(const at::Tensor& scale) {
  return scale.numel() == 1 ? scale.reshape({1, 1}) : scale;
}

template <typename Float8>
void CastOnCpu(const at::Tensor& hp, const at::Tensor& scale, at::Tensor& out, int64_t row_stride,
               int64_t col_stride, float max) {
  const int64_t cols = hp.size(1);
  const float* s = scale.data_ptr<float>();
  Float8* o = static_cast<Float8*>(out.data_ptr());
  DispatchCpu(KernelDtypeOf(hp, "hp").value(), [&](auto zero) {
    using T = decltype(zero);
    const T* x = hp.data_ptr<T>();
    const auto cast_rows = [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        for (int64_t col = 0; col < cols; ++col) {
          const int64_t i = row * cols + col;
          o[i] = Float8(ScaleSaturate(static_cast<float>(x[i]),
                                      s[ScaleIndex(row, col, row_stride, col_stride)], max));
        }
      }
    };
    ParallelForRows(hp.size(0), cols, cast_rows);
  });
}

// The row-major case.
at::Tensor CastRowMajor(const at::Tensor& hp, const at::Tensor& scale, at::ScalarType dtype) {
  at::Tensor out = at::empty(hp.sizes(), hp.options().dtype(dtype));
  const at::Tensor scale2d = Scale2d(scale);
  const at::Tensor expanded = scale2d.expand({hp.size(0), hp.size(1)});
  const float max = static_cast<float>(Float8MaxOf(dtype));
  if (hp.is_cuda()) {
    const c10::cuda::CUDAGuard guard(hp.device());
    C10_CUDA_CHECK(LaunchScaledCastToFloat8(
        KernelDtypeOf(hp, "hp").value(), hp.data_ptr(), scale2d.data_ptr<float>(), hp.size(0),
        hp.size(1), expanded.stride(0), expanded.stride(1),
        dtype == at::kFloat8_e4m3fn ? Float8KernelDtype::kE4m3fn : Float8KernelDtype::kE5m2, max,
        out.data_ptr(), at::cuda::getCurrentCUDAStream()));
  } else if (dtype == at::kFloat8_e4m3fn) {
    CastOnCpu<c10::Float8_e4m3fn>(hp, scale2d, out, expanded.stride(0), expanded.stride(1), max);
  } else {
    CastOnCpu<c10::Float8_e5m2>(hp, scale2d, out, expanded.stride(0), expanded.stride(1), max);
  }
  return out;
}

// The row-major case of FusedScaledCastToFloat8BothLayouts.
Float8CastLayouts CastRowMajorBothLayouts(const at::Tensor& hp, const at::Tensor& scale,
                                          at::ScalarType dtype) {
  if (!hp.is_cuda()) {
    at::Tensor row_major = CastRowMajor(hp, scale, dtype);
    at::Tensor column_major = row_major.t().contiguous().t();
    return {std::move(row_major), std::move(column_major)};
  }
  at::Tensor out = at::empty(hp.sizes(), hp.options().dtype(dtype));
  at::Tensor out_t = at::empty({hp.size(1), hp.size(0)}, hp.options().dtype(dtype));
  const at::Tensor scale2d = Scale2d(scale);
  const at::Tensor expanded = scale2d.expand({hp.size(0), hp.size(1)});
  const c10::cuda::CUDAGuard guard(hp.device());
  C10_CUDA_CHECK(LaunchScaledCastToFloat8BothLayouts(
      KernelDtypeOf(hp, "hp").value(), hp.data_ptr(), scale2d.data_ptr<float>(), hp.size(0),
      hp.size(1), expanded.stride(0), expanded.stride(1),
      dtype == at::kFloat8_e4m3fn ? Float8KernelDtype::kE4m3fn : Float8KernelDtype::kE5m2,
      static_cast<float>(Float8MaxOf(dtype)), out.data_ptr(), out_t.data_ptr(),
      at::cuda::getCurrentCUDAStream()));
  return {std::move(out), out_t.t()};
}

}  // namespace

double Float8MaxOf(at::ScalarType dtype) {
  return dtype == at::kFloat8_e5m2
             ? static_cast<double>(std::numeric_limits<c10::Float8_e5m2>::max())
             : static_cast<double>(std::numeric_limits<c10::Float8_e4m3fn>::max());
}

absl::Status FusedFloat8ScalesSupports(const at::Tensor& amax) {
  TITAN_RETURN_IF_ERROR(KernelDtypeOf(amax, "amax").status());
  if (!amax.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("amax: expected a CUDA tensor, got one on ", amax.device().str()));
  }
  TITAN_RETURN_IF_ERROR(CheckKernelDevice(amax, "amax", FusedKernel::kFloat8Cast));
  if (!amax.is_contiguous()) {
    return absl::InvalidArgumentError("amax: expected a contiguous tensor");
  }
  return absl::OkStatus();
}

Float8Scales FusedFloat8ScalesFromAmax(const at::Tensor& amax, at::ScalarType dtype) {
  ThrowIfError(FusedFloat8ScalesSupports(amax));
  Float8Scales out{at::empty(amax.sizes(), amax.options().dtype(at::kFloat)),
                   at::empty(amax.sizes(), amax.options().dtype(at::kFloat))};
  const c10::cuda::CUDAGuard guard(amax.device());
  C10_CUDA_CHECK(
      LaunchFloat8ScalesFromAmax(KernelDtypeOf(amax, "amax").value(), amax.data_ptr(), amax.numel(),
                                 Float8MaxOf(dtype), out.scale.data_ptr<float>(),
                                 out.inverse.data_ptr<float>(), at::cuda::getCurrentCUDAStream()));
  return out;
}

absl::Status FusedFloat8CastSupports(const at::Tensor& hp, const at::Tensor& scale,
                                     at::ScalarType dtype) {
  TITAN_RETURN_IF_ERROR(KernelDtypeOf(hp, "hp").status());
  TITAN_RETURN_IF_ERROR(CheckKernelDevice(hp, "hp", FusedKernel::kFloat8Cast));
  if (dtype != at::kFloat8_e4m3fn && dtype != at::kFloat8_e5m2) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype: expected Float8_e4m3fn or Float8_e5m2, got ", c10::toString(dtype)));
  }
  if (hp.dim() != 2 || !(hp.is_contiguous() || hp.t().is_contiguous())) {
    return absl::InvalidArgumentError(
        absl::StrCat("hp: expected a row- or column-major 2-D tensor, got ", ShapeOf(hp)));
  }
  const bool one = scale.numel() == 1;
  const bool per_row = scale.dim() == 2 && scale.size(0) == hp.size(0) && scale.size(1) == 1;
  const bool per_col = scale.dim() == 2 && scale.size(0) == 1 && scale.size(1) == hp.size(1);
  if (scale.scalar_type() != at::kFloat || scale.device() != hp.device() ||
      !(one || per_row || per_col)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scale: expected float32 on ", hp.device().str(), " of one value, [",
                     hp.size(0), ", 1] or [1, ", hp.size(1), "], got ", ShapeOf(scale), " ",
                     c10::toString(scale.scalar_type()), " on ", scale.device().str()));
  }
  return absl::OkStatus();
}

at::Tensor FusedScaledCastToFloat8(const at::Tensor& hp, const at::Tensor& scale,
                                   at::ScalarType dtype) {
  ThrowIfError(FusedFloat8CastSupports(hp, scale, dtype));
  // A column-major tensor is the transpose of a row-major one: cast that, keep the layout.
  if (!hp.is_contiguous()) return CastRowMajor(hp.t(), Scale2d(scale).t(), dtype).t();
  return CastRowMajor(hp, scale, dtype);
}

Float8CastLayouts FusedScaledCastToFloat8BothLayouts(const at::Tensor& hp, const at::Tensor& scale,
                                                     at::ScalarType dtype) {
  ThrowIfError(FusedFloat8CastSupports(hp, scale, dtype));
  if (!hp.is_contiguous()) {
    // hp is the transpose of a row-major tensor: that tensor's two layouts, swapped.
    Float8CastLayouts layouts = CastRowMajorBothLayouts(hp.t(), Scale2d(scale).t(), dtype);
    return {layouts.column_major.t(), layouts.row_major.t()};
  }
  return CastRowMajorBothLayouts(hp, scale, dtype);
}

}  // namespace titan
