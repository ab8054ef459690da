#include "lib/kernels/adam.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/kernels/kernel_dispatch.h"
#include "lib/kernels/launch.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

// Blocks per SM a launch starts: two fit at once (the kernel's registers), the rest wait.
constexpr int kAdamBlocksPerSm = 8;

absl::Status CheckTensor(const at::Tensor& t, const at::Tensor& param, absl::string_view list,
                         size_t i, at::ScalarType dtype = at::kFloat) {
  const std::string name = absl::StrCat(list, "[", i, "]");
  if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(name, ": undefined"));
  if (t.scalar_type() != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected ",
                                                   c10::getDtypeNames(dtype).first, ", got ",
                                                   c10::toString(t.scalar_type())));
  }
  if (t.device() != param.device()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": on ", t.device().str(), ", expected ", param.device().str()));
  }
  if (list == "steps") {
    if (t.numel() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": expected one step count"));
    }
    return absl::OkStatus();
  }
  if (!t.sizes().equals(param.sizes()) || !t.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": expected a contiguous ", ShapeOf(param),
                                                   " tensor, got ", ShapeOf(t)));
  }
  return absl::OkStatus();
}

absl::Status CheckBf16Copies(at::TensorList params, at::TensorList copies) {
  if (copies.empty()) return absl::OkStatus();
  if (copies.size() != params.size()) {
    return absl::InvalidArgumentError("bf16_copies: expected none or one per parameter");
  }
  for (size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].defined()) {
      TITAN_RETURN_IF_ERROR(CheckTensor(copies[i], params[i], "bf16_copies", i, at::kBFloat16));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FusedAdamSupports(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                               at::TensorList exp_avg_sqs, at::TensorList steps,
                               const at::Tensor& grad_scale) {
  if (grads.size() != params.size() || exp_avgs.size() != params.size() ||
      exp_avg_sqs.size() != params.size() || steps.size() != params.size()) {
    return absl::InvalidArgumentError(
        "the lists of params, grads, moments and steps differ in length");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& param = params[i];
    if (!param.is_cuda()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "params[", i, "]: expected a CUDA tensor, got one on ", param.device().str()));
    }
    if (param.is_inference()) {  // its version counter cannot advance
      return absl::InvalidArgumentError(absl::StrCat("params[", i, "]: an inference tensor"));
    }
    TITAN_RETURN_IF_ERROR(
        CheckKernelDevice(param, absl::StrCat("params[", i, "]"), FusedKernel::kAdam));
    if (param.device() != params[0].device()) {
      return absl::InvalidArgumentError(absl::StrCat("params[", i, "]: on ", param.device().str(),
                                                     ", params[0] on ", params[0].device().str()));
    }
    TITAN_RETURN_IF_ERROR(CheckTensor(param, param, "params", i));
    TITAN_RETURN_IF_ERROR(CheckTensor(grads[i], param, "grads", i));
    TITAN_RETURN_IF_ERROR(CheckTensor(exp_avgs[i], param, "exp_avgs", i));
    TITAN_RETURN_IF_ERROR(CheckTensor(exp_avg_sqs[i], param, "exp_avg_sqs", i));
    TITAN_RETURN_IF_ERROR(CheckTensor(steps[i], param, "steps", i));
  }
  if (grad_scale.defined() && !params.empty() &&
      (grad_scale.numel() != 1 || grad_scale.scalar_type() != at::kFloat ||
       grad_scale.device() != params[0].device())) {
    return absl::InvalidArgumentError(
        absl::StrCat("grad_scale: expected one float32 on ", params[0].device().str(), ", got ",
                     c10::toString(grad_scale.scalar_type()), " ", ShapeOf(grad_scale), " on ",
                     grad_scale.device().str()));
  }
  return absl::OkStatus();
}

void FusedAdamStep(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                   at::TensorList exp_avg_sqs, at::TensorList steps, const AdamSettings& settings,
                   const at::Tensor& grad_scale, at::TensorList bf16_copies) {
  ThrowIfError(FusedAdamSupports(params, grads, exp_avgs, exp_avg_sqs, steps, grad_scale));
  ThrowIfError(CheckBf16Copies(params, bf16_copies));
  if (params.empty()) return;
  std::vector<AdamTensorPointers> pointers;
  pointers.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const bool copy = !bf16_copies.empty() && bf16_copies[i].defined();
    pointers.push_back({params[i].data_ptr<float>(), grads[i].data_ptr<float>(),
                        exp_avgs[i].data_ptr<float>(), exp_avg_sqs[i].data_ptr<float>(),
                        steps[i].data_ptr<float>(), params[i].numel(),
                        copy ? bf16_copies[i].data_ptr() : nullptr});
  }
  // As ATen's kernel: the double settings rounded once to fp32.
  const AdamConstants constants{
      static_cast<float>(settings.lr),           static_cast<float>(settings.beta1),
      static_cast<float>(settings.beta2),        static_cast<float>(settings.eps),
      static_cast<float>(settings.weight_decay), settings.decoupled};
  const c10::cuda::CUDAGuard guard(params[0].device());
  const int blocks = at::cuda::getCurrentDeviceProperties()->multiProcessorCount * kAdamBlocksPerSm;
  C10_CUDA_CHECK(LaunchFusedAdam(pointers.data(), static_cast<int64_t>(pointers.size()), constants,
                                 grad_scale.defined() ? grad_scale.data_ptr<float>() : nullptr,
                                 blocks, at::cuda::getCurrentCUDAStream()));
  for (size_t i = 0; i < params.size(); ++i) {
    for (const at::Tensor& written : {params[i], exp_avgs[i], exp_avg_sqs[i]}) {
      written.unsafeGetTensorImpl()->bump_version();
    }
    if (!bf16_copies.empty() && bf16_copies[i].defined()) {
      bf16_copies[i].unsafeGetTensorImpl()->bump_version();
    }
  }
}

}  // namespace titan
