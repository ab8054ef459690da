#include "lib/kernels/swiglu.h"

#include <ATen/Parallel.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include "absl/strings/str_cat.h"
#include "lib/kernels/kernel_dispatch.h"
#include "lib/kernels/launch.h"
#include "lib/kernels/swiglu_math.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Runs f(i) for every element index in parallel on the CPU threads.
template <typename F>
void ForEachElement(int64_t n, const F& f) {
  at::parallel_for(0, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

at::Tensor Forward(const at::Tensor& gate, const at::Tensor& up) {
  const KernelDtype dtype = KernelDtypeOf(gate, "gate").value();
  at::Tensor out = at::empty(gate.sizes(), gate.options());
  if (gate.is_cuda()) {
    const c10::cuda::CUDAGuard guard(gate.device());
    C10_CUDA_CHECK(LaunchSwiGluForward(dtype, gate.data_ptr(), up.data_ptr(), gate.numel(),
                                       out.data_ptr(), at::cuda::getCurrentCUDAStream()));
    return out;
  }
  DispatchCpu(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* g = gate.data_ptr<T>();
    const T* u = up.data_ptr<T>();
    T* o = out.data_ptr<T>();
    ForEachElement(gate.numel(), [&](int64_t i) {
      o[i] = static_cast<T>(SwiGluElement(static_cast<float>(g[i]), static_cast<float>(u[i])));
    });
  });
  return out;
}

// {grad_gate, grad_up}.
variable_list Backward(const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up) {
  const KernelDtype dtype = KernelDtypeOf(gate, "gate").value();
  at::Tensor grad_gate = at::empty(gate.sizes(), gate.options());
  at::Tensor grad_up = at::empty(gate.sizes(), gate.options());
  if (gate.is_cuda()) {
    const c10::cuda::CUDAGuard guard(gate.device());
    C10_CUDA_CHECK(LaunchSwiGluBackward(dtype, grad.data_ptr(), gate.data_ptr(), up.data_ptr(),
                                        gate.numel(), grad_gate.data_ptr(), grad_up.data_ptr(),
                                        at::cuda::getCurrentCUDAStream()));
    return {grad_gate, grad_up};
  }
  DispatchCpu(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* dy = grad.data_ptr<T>();
    const T* g = gate.data_ptr<T>();
    const T* u = up.data_ptr<T>();
    T* dg = grad_gate.data_ptr<T>();
    T* du = grad_up.data_ptr<T>();
    ForEachElement(gate.numel(), [&](int64_t i) {
      const SwiGluGrads r = SwiGluElementBackward(
          static_cast<float>(dy[i]), static_cast<float>(g[i]), static_cast<float>(u[i]));
      dg[i] = static_cast<T>(r.gate);
      du[i] = static_cast<T>(r.up);
    });
  });
  return {grad_gate, grad_up};
}

struct SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up) {
    ThrowIfError(FusedSwiGluSupports(gate, up));
    const at::Tensor g = gate.contiguous();
    const at::Tensor u = up.contiguous();
    ctx->save_for_backward({g, u});
    return Forward(g, u);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    return Backward(grad_outputs[0].contiguous(), saved[0], saved[1]);
  }
};

}  // namespace

absl::Status FusedSwiGluSupports(const at::Tensor& gate, const at::Tensor& up) {
  TITAN_RETURN_IF_ERROR(KernelDtypeOf(gate, "gate").status());
  TITAN_RETURN_IF_ERROR(CheckKernelDevice(gate, "gate", FusedKernel::kSwiGlu));
  if (up.sizes() != gate.sizes() || up.scalar_type() != gate.scalar_type() ||
      up.device() != gate.device()) {
    return absl::InvalidArgumentError(
        absl::StrCat("up: expected gate's ", ShapeOf(gate), " ", c10::toString(gate.scalar_type()),
                     " on ", gate.device().str(), ", got ", ShapeOf(up), " ",
                     c10::toString(up.scalar_type()), " on ", up.device().str()));
  }
  return absl::OkStatus();
}

at::Tensor FusedSwiGlu(const at::Tensor& gate, const at::Tensor& up) {
  return SwiGluFunction::apply(gate, up);
}

}  // namespace titan
