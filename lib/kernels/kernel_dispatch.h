#ifndef TITAN_LIB_KERNELS_KERNEL_DISPATCH_H_
#define TITAN_LIB_KERNELS_KERNEL_DISPATCH_H_

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "lib/kernels/launch.h"

// What the fused ops' LibTorch wrappers share: which tensors they take, and where they run.

namespace titan {

// The kernel element type of `t` (fp32, bf16 or fp16); `name` names t in the error.
absl::StatusOr<KernelDtype> KernelDtypeOf(const at::Tensor& t, absl::string_view name);

// titan's CUDA fast paths, each of which [compile] disabled_kernels turns off alone (a kernel
// misbehaving on some GPU need not cost the others).
enum class FusedKernel {
  kRope,
  kSwiGlu,
  kFloat8Cast,  // the casts and their scales
  kAdam,
  kBf16WeightCopies,  // written by the Adam kernel
  kCrossEntropy,
  kMixedPrecisionLinear,
  kCount,  // not a kernel: how many there are
};

// The config's name of a kernel ("rope", "swiglu", "float8_cast", "adam", "bf16_weight_copies",
// "cross_entropy", "mixed_precision_linear"), and back.
absl::string_view FusedKernelName(FusedKernel kernel);
absl::StatusOr<FusedKernel> FusedKernelNamed(absl::string_view name);

// [compile] fused_kernels (false: every kernel off, the model's ops run LibTorch's compositions,
// the kernels' references) and disabled_kernels (those off). Process-wide; all on by default.
void SetFusedKernels(bool enabled, const std::vector<FusedKernel>& disabled = {});
bool FusedKernelEnabled(FusedKernel kernel);

// OK on the CPU (the reference loops) and on CUDA devices of compute capability 9.0 (the kernels
// are built for sm_90a alone) unless `kernel` is turned off.
absl::Status CheckKernelDevice(const at::Tensor& t, absl::string_view name, FusedKernel kernel);

// "[2, 3, 4]".
std::string ShapeOf(const at::Tensor& t);

// Throws c10::Error with the status's message unless it is OK: autograd functions' checks.
void ThrowIfError(const absl::Status& status);

// f(T{}) with T LibTorch's element type for `dtype`: the CPU reference loops.
template <typename F>
void DispatchCpu(KernelDtype dtype, F&& f) {
  switch (dtype) {
    case KernelDtype::kFloat32:
      return f(float{});
    case KernelDtype::kBFloat16:
      return f(at::BFloat16{});
    case KernelDtype::kFloat16:
      return f(at::Half{});
  }
}

// body(begin, end) over ranges of [0, rows) on LibTorch's CPU threads, about 4096 elements of
// `row_length` per task: the CPU reference loops that walk rows, as the kernels do.
template <typename F>
void ParallelForRows(int64_t rows, int64_t row_length, F&& body) {
  at::parallel_for(0, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(row_length, 1)), body);
}

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_KERNEL_DISPATCH_H_
