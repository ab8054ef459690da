#include "lib/kernels/rope.h"

#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/kernels/kernel_dispatch.h"
#include "lib/kernels/launch.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x rotated by the angles of cos/sin, or by their negatives when `inverse`, on x's device.
at::Tensor Rotate(const at::Tensor& x_in, const at::Tensor& cos_in, const at::Tensor& sin_in,
                  RopePairing pairing, bool inverse) {
  const at::Tensor x = x_in.contiguous();
  const at::Tensor cos = cos_in.contiguous();
  const at::Tensor sin = sin_in.contiguous();
  const RopeDims dims{x.size(0), x.size(1), x.size(2), x.size(3), cos.size(0) == 1, pairing};
  const KernelDtype dtype = KernelDtypeOf(x, "x").value();
  at::Tensor out = at::empty(x.sizes(), x.options());
  if (x.is_cuda()) {
    const c10::cuda::CUDAGuard guard(x.device());
    C10_CUDA_CHECK(LaunchRope(dtype, x.data_ptr(), cos.data_ptr<float>(), sin.data_ptr<float>(),
                              dims, inverse, out.data_ptr(), at::cuda::getCurrentCUDAStream()));
    return out;
  }
  const float* c = cos.data_ptr<float>();
  const float* s = sin.data_ptr<float>();
  const float sin_sign = inverse ? -1.0f : 1.0f;
  DispatchCpu(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* in = x.data_ptr<T>();
    T* o = out.data_ptr<T>();
    const int64_t half = dims.head_dim / 2;
    const auto rotate_rows = [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const RopeRowStart start = RopeRowStartOf(row, dims);
        for (int64_t j = 0; j < half; ++j) {
          const RopePairInRow pair = RopePairOf(j, dims);
          const int64_t first = start.x + pair.first, second = start.x + pair.second;
          const RotatedPair r =
              RotatePair(static_cast<float>(in[first]), static_cast<float>(in[second]),
                         c[start.angle + j], sin_sign * s[start.angle + j]);
          o[first] = static_cast<T>(r.first);
          o[second] = static_cast<T>(r.second);
        }
      }
    };
    ParallelForRows(dims.rows(), half, rotate_rows);
  });
  return out;
}

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin, int64_t pairing, bool inverse) {
    ThrowIfError(FusedRopeSupports(x, cos, sin));
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["pairing"] = pairing;
    ctx->saved_data["inverse"] = inverse;
    return Rotate(x, cos, sin, static_cast<RopePairing>(pairing), inverse);
  }

  // A rotation's adjoint is the opposite rotation, itself a RopeFunction (so differentiable).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    return {apply(grad_outputs[0], saved[0], saved[1], ctx->saved_data["pairing"].toInt(),
                  !ctx->saved_data["inverse"].toBool()),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

absl::Status FusedRopeSupports(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (x.dim() != 4 || x.size(3) % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("x: expected [B, S, H, D] with D even, got ", ShapeOf(x)));
  }
  TITAN_RETURN_IF_ERROR(KernelDtypeOf(x, "x").status());
  TITAN_RETURN_IF_ERROR(CheckKernelDevice(x, "x", FusedKernel::kRope));
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor&>{"cos", cos}, {"sin", sin}}) {
    if (t.dim() != 4 || (t.size(0) != 1 && t.size(0) != x.size(0)) || t.size(1) != x.size(1) ||
        t.size(2) != 1 || t.size(3) != x.size(3) / 2) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": expected [1 or ", x.size(0), ", ",
                                                     x.size(1), ", 1, ", x.size(3) / 2, "] for x ",
                                                     ShapeOf(x), ", got ", ShapeOf(t)));
    }
    if (t.scalar_type() != at::kFloat || t.device() != x.device()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": expected float32 on ", x.device().str(), ", got ",
                       c10::toString(t.scalar_type()), " on ", t.device().str()));
    }
    if (t.requires_grad()) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": the fused op differentiates x only"));
    }
  }
  // The kernels read both with cos's batch size.
  if (sin.sizes() != cos.sizes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sin: expected cos's shape ", ShapeOf(cos), ", got ", ShapeOf(sin)));
  }
  return absl::OkStatus();
}

at::Tensor FusedRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     RopePairing pairing) {
  return RopeFunction::apply(x, cos, sin, static_cast<int64_t>(pairing), /*inverse=*/false);
}

}  // namespace titan
