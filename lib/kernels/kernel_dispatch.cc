#include "lib/kernels/kernel_dispatch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <iterator>

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

// In FusedKernel's order.
constexpr absl::string_view kKernelNames[] = {"rope",
                                              "swiglu",
                                              "float8_cast",
                                              "adam",
                                              "bf16_weight_copies",
                                              "cross_entropy",
                                              "mixed_precision_linear"};
static_assert(std::size(kKernelNames) == static_cast<size_t>(FusedKernel::kCount),
              "a name for every kernel");

std::atomic<bool> g_fused_kernels{true};
std::atomic<uint32_t> g_disabled{0};  // bit k: FusedKernel k is off

uint32_t BitOf(FusedKernel kernel) { return 1u << static_cast<int>(kernel); }

}  // namespace

absl::string_view FusedKernelName(FusedKernel kernel) {
  return kKernelNames[static_cast<int>(kernel)];
}

absl::StatusOr<FusedKernel> FusedKernelNamed(absl::string_view name) {
  for (int k = 0; k < static_cast<int>(FusedKernel::kCount); ++k) {
    if (kKernelNames[k] == name) return static_cast<FusedKernel>(k);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown kernel \"", name, "\"; expected one of ",
                                                 absl::StrJoin(kKernelNames, ", ")));
}

void SetFusedKernels(bool enabled, const std::vector<FusedKernel>& disabled) {
  uint32_t bits = 0;
  for (FusedKernel kernel : disabled) bits |= BitOf(kernel);
  g_disabled = bits;
  g_fused_kernels = enabled;
}

bool FusedKernelEnabled(FusedKernel kernel) {
  return g_fused_kernels && (g_disabled & BitOf(kernel)) == 0;
}

absl::Status CheckKernelDevice(const at::Tensor& t, absl::string_view name, FusedKernel kernel) {
  if (t.is_cpu()) return absl::OkStatus();
  if (t.is_cuda()) {
    if (!g_fused_kernels) {
      return absl::FailedPreconditionError(
          absl::StrCat(name, ": the CUDA kernels are off ([compile] fused_kernels = false)"));
    }
    if (!FusedKernelEnabled(kernel)) {
      return absl::FailedPreconditionError(absl::StrCat(name, ": the CUDA kernel \"",
                                                        FusedKernelName(kernel),
                                                        "\" is off ([compile] disabled_kernels)"));
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
