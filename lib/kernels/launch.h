#ifndef TITAN_LIB_KERNELS_LAUNCH_H_
#define TITAN_LIB_KERNELS_LAUNCH_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "lib/kernels/adam_math.h"
#include "lib/kernels/cross_entropy_math.h"
#include "lib/kernels/rope_math.h"

// The CUDA kernels' host API (rope.cu, swiglu.cu, float8_cast.cu, adam.cu, cross_entropy.cu): raw
// device pointers, contiguous tensors, fp32 math whatever the element type. Each returns the
// launch's error (cudaSuccess when nothing ran).

namespace titan {

enum class KernelDtype { kFloat32, kBFloat16, kFloat16 };
enum class Float8KernelDtype { kE4m3fn, kE5m2 };

// out = x rotated by the angles of cos/sin (fp32), or by their negatives when `inverse`.
cudaError_t LaunchRope(KernelDtype dtype, const void* x, const float* cos, const float* sin,
                       const RopeDims& dims, bool inverse, void* out, cudaStream_t stream);

// out = silu(gate) * up over n elements.
cudaError_t LaunchSwiGluForward(KernelDtype dtype, const void* gate, const void* up, int64_t n,
                                void* out, cudaStream_t stream);

// grad_gate, grad_up of silu(gate) * up for the output's gradient `grad`, over n elements.
cudaError_t LaunchSwiGluBackward(KernelDtype dtype, const void* grad, const void* gate,
                                 const void* up, int64_t n, void* grad_gate, void* grad_up,
                                 cudaStream_t stream);

// out = float8(saturate(x · scale, ±max)) over a row-major [rows, cols] x, the fp32 scale of
// element (r, c) at scale[r · scale_row_stride + c · scale_col_stride]; one read, one write.
cudaError_t LaunchScaledCastToFloat8(KernelDtype dtype, const void* x, const float* scale,
                                     int64_t rows, int64_t cols, int64_t scale_row_stride,
                                     int64_t scale_col_stride, Float8KernelDtype out_dtype,
                                     float max, void* out, cudaStream_t stream);

// The same cast written row-major into `out` and column-major into `out_t` (a [cols, rows]
// row-major buffer) from one read of x: the two layouts a float8 operand takes in _scaled_mm.
cudaError_t LaunchScaledCastToFloat8BothLayouts(KernelDtype dtype, const void* x,
                                                const float* scale, int64_t rows, int64_t cols,
                                                int64_t scale_row_stride, int64_t scale_col_stride,
                                                Float8KernelDtype out_dtype, float max, void* out,
                                                void* out_t, cudaStream_t stream);

// scale[i] = Float8ScaleFromAmax(amax[i], max) and inverse_scale[i] = 1 / scale[i] in fp32 (the
// operand scale _scaled_mm takes), for n maxima: one launch for what ATen does in six.
cudaError_t LaunchFloat8ScalesFromAmax(KernelDtype dtype, const void* amax, int64_t n, double max,
                                       float* scale, float* inverse_scale, cudaStream_t stream);

// Cross-entropy of each row of a row-major [rows, cols] `logits` (rows < 2^31) against its label
// (an index into the row; ignore_index: not counted): stats[r] the row's softmax statistics,
// loss[r] = -log softmax(row)[label] (0 for an ignored row, NaN for a label outside [0, cols)).
cudaError_t LaunchCrossEntropyForward(KernelDtype dtype, const void* logits, const int64_t* labels,
                                      int64_t rows, int64_t cols, int64_t ignore_index,
                                      SoftmaxStats* stats, float* loss, cudaStream_t stream);

// The logits' gradient of the counted rows' summed loss for the upstream gradient *grad (a device
// fp32 scalar): *grad · (softmax - one-hot) in counted rows, 0 in ignored ones, in the logits'
// dtype.
cudaError_t LaunchCrossEntropyBackward(KernelDtype dtype, const void* logits, const int64_t* labels,
                                       const SoftmaxStats* stats, const float* grad, int64_t rows,
                                       int64_t cols, int64_t ignore_index, void* grad_logits,
                                       cudaStream_t stream);

// One parameter's fp32 tensors for an Adam step (numel elements each, contiguous) and its step
// count (fp32, on the device, already advanced for this step); `param_bf16`: null, or numel bf16
// elements where the updated parameter is also written, rounded to nearest even (as .to(bf16)).
struct AdamTensorPointers {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  const float* step;
  int64_t numel;
  void* param_bf16;
};

// The tensors one launch takes: their pointers travel as kernel arguments (under 4 KB).
constexpr int kAdamTensorsPerLaunch = 48;

// Adam(W) steps of `count` parameters (adam_math.h), each gradient first multiplied by
// *grad_scale (a device fp32 scalar; null: by 1); at most `blocks` blocks a launch, one launch
// per kAdamTensorsPerLaunch tensors. The gradients are read, not written.
cudaError_t LaunchFusedAdam(const AdamTensorPointers* tensors, int64_t count,
                            const AdamConstants& constants, const float* grad_scale, int blocks,
                            cudaStream_t stream);

}  // namespace titan

#endif  // TITAN_LIB_KERNELS_LAUNCH_H_
