#include "lib/kernels/cross_entropy.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "lib/kernels/cross_entropy_math.h"
#include "lib/kernels/kernel_dispatch.h"
#include "lib/kernels/launch.h"
#include "lib/util/status_macros.h"

namespace titan {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

static_assert(sizeof(SoftmaxStats) == 2 * sizeof(float), "stats travel as [N, 2] fp32");

SoftmaxStats* StatsOf(const at::Tensor& stats) {
  return reinterpret_cast<SoftmaxStats*>(stats.data_ptr<float>());
}

// {stats [N, 2] (each row's SoftmaxStats), loss [N]} (fp32).
std::pair<at::Tensor, at::Tensor> Forward(const at::Tensor& logits, const at::Tensor& labels,
                                          int64_t ignore_index) {
  const int64_t rows = logits.size(0);
  const int64_t cols = logits.size(1);
  const KernelDtype dtype = KernelDtypeOf(logits, "logits").value();
  at::Tensor stats = at::empty({rows, 2}, logits.options().dtype(at::kFloat));
  at::Tensor loss = at::empty({rows}, logits.options().dtype(at::kFloat));
  if (logits.is_cuda()) {
    const c10::cuda::CUDAGuard guard(logits.device());
    C10_CUDA_CHECK(LaunchCrossEntropyForward(
        dtype, logits.data_ptr(), labels.data_ptr<int64_t>(), rows, cols, ignore_index,
        StatsOf(stats), loss.data_ptr<float>(), at::cuda::getCurrentCUDAStream()));
    return {stats, loss};
  }
  const int64_t* label = labels.data_ptr<int64_t>();
  SoftmaxStats* stats_out = StatsOf(stats);
  float* loss_out = loss.data_ptr<float>();
  DispatchCpu(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* x = logits.data_ptr<T>();
    ParallelForRows(rows, cols, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        LogSumExpPart part;
        for (int64_t c = 0; c < cols; ++c) {
          AddToLogSumExp(part, static_cast<float>(x[r * cols + c]));
        }
        stats_out[r] = SoftmaxStatsOf(part);
        const int64_t l = label[r];
        loss_out[r] = l == ignore_index ? 0.0f
                      : l < 0 || l >= cols
                          ? std::numeric_limits<float>::quiet_NaN()
                          : CrossEntropyLoss(stats_out[r], static_cast<float>(x[r * cols + l]));
      }
    });
  });
  return {stats, loss};
}

at::Tensor Backward(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& stats,
                    const at::Tensor& grad, int64_t ignore_index) {
  const int64_t rows = logits.size(0);
  const int64_t cols = logits.size(1);
  const KernelDtype dtype = KernelDtypeOf(logits, "logits").value();
  at::Tensor grad_logits = at::empty_like(logits);
  if (logits.is_cuda()) {
    const c10::cuda::CUDAGuard guard(logits.device());
    C10_CUDA_CHECK(LaunchCrossEntropyBackward(dtype, logits.data_ptr(), labels.data_ptr<int64_t>(),
                                              StatsOf(stats), grad.data_ptr<float>(), rows, cols,
                                              ignore_index, grad_logits.data_ptr(),
                                              at::cuda::getCurrentCUDAStream()));
    return grad_logits;
  }
  const int64_t* label = labels.data_ptr<int64_t>();
  const SoftmaxStats* row_stats = StatsOf(stats);
  const float g = grad.item<float>();
  DispatchCpu(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* x = logits.data_ptr<T>();
    T* out = grad_logits.data_ptr<T>();
    ParallelForRows(rows, cols, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float row_grad = label[r] == ignore_index ? 0.0f : g;
        for (int64_t c = 0; c < cols; ++c) {
          out[r * cols + c] = static_cast<T>(CrossEntropyGradElement(
              static_cast<float>(x[r * cols + c]), row_stats[r], c == label[r], row_grad));
        }
      }
    });
  });
  return grad_logits;
}

struct CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& labels, int64_t ignore_index) {
    ThrowIfError(FusedCrossEntropySupports(logits, labels));
    auto [stats, loss] = Forward(logits, labels, ignore_index);
    ctx->save_for_backward({logits, labels, stats});
    ctx->saved_data["ignore_index"] = ignore_index;
    return loss.sum();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    // One fp32 on the logits' device, whatever the engine hands in.
    const at::Tensor grad = grad_outputs[0].to(saved[0].device(), at::kFloat).contiguous();
    return {Backward(saved[0], saved[1], saved[2], grad, ctx->saved_data["ignore_index"].toInt()),
            at::Tensor(), at::Tensor()};
  }
};

}  // namespace

absl::Status FusedCrossEntropySupports(const at::Tensor& logits, const at::Tensor& labels) {
  TITAN_RETURN_IF_ERROR(KernelDtypeOf(logits, "logits").status());
  TITAN_RETURN_IF_ERROR(CheckKernelDevice(logits, "logits", FusedKernel::kCrossEntropy));
  if (logits.dim() != 2 || !logits.is_contiguous() ||
      logits.size(0) > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "logits: expected a contiguous [N, V] tensor with N < 2^31, got ", ShapeOf(logits)));
  }
  if (labels.dim() != 1 || labels.size(0) != logits.size(0) || labels.scalar_type() != at::kLong ||
      labels.device() != logits.device() || !labels.is_contiguous()) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels: expected contiguous int64 [", logits.size(0), "] on ",
                     logits.device().str(), ", got ", c10::toString(labels.scalar_type()), " ",
                     ShapeOf(labels), " on ", labels.device().str()));
  }
  return absl::OkStatus();
}

at::Tensor FusedCrossEntropySum(const at::Tensor& logits, const at::Tensor& labels,
                                int64_t ignore_index) {
  return CrossEntropyFunction::apply(logits, labels, ignore_index);
}

}  // namespace titan
