#include "lib/kernels/kernel_dispatch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace titan {

absl::StatusOr<KernelDtype> KernelDtypeOf(const at::Tensor& t, absl::string_view name) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return KernelDtype::kFloat32;
    case at::kBFloat16:
      return KernelDtype::kBFloat16;
    case at::kHalf:
      return KernelDtype::kFloat16;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": expected float32, bfloat16 or float16, got ", c10::toString(t.scalar_type())));
  }
}

namespace {
std::atomic<bool> g_fused_kernels{true};
}  // namespace

void SetFusedKernelsEnabled(bool enabled) { g_fused_kernels = enabled; }

bool FusedKernelsEnabled() { return g_fused_kernels; }

absl::Status CheckKernelDevice(const at::Tensor& t, absl::string_view name) {
  if (t.is_cpu()) return absl::OkStatus();
  if (t.is_cuda()) {
    if (!g_fused_kernels) {
      return absl::FailedPreconditionError(
          absl::StrCat(name, ": the CUDA kernels are off ([compile] fused_kernels = false)"));
    }
    const cudaDeviceProp* properties = at::cuda::getDeviceProperties(t.device().index());
    if (properties->major == 9 && properties->minor == 0) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(name, ": the kernels are built for sm_90a, ",
                                                      t.device().str(), " is sm_",
                                                      properties->major, properties->minor));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": expected a CPU or CUDA tensor, got one on ", t.device().str()));
}

std::string ShapeOf(const at::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

void ThrowIfError(const absl::Status& status) { TORCH_CHECK(status.ok(), status.message()); }

}  // namespace titan
